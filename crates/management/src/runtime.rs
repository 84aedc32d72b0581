//! How the runtime objects — connections, channels, consumers — look in RabbitMQ 4.0.5's
//! management API, and who sees which (`rabbit_mgmt_util:filter_user`: monitors and
//! administrators see everyone's, other management users their own).
//!
//! Charon leaves out what only an Erlang node has (`garbage_collection`, `reductions`) and the
//! byte and rate counters it does not keep per connection (`recv_oct`, `send_oct`, `recv_cnt`,
//! `send_cnt`, `send_pend` and their `_details`); for TLS connections the `ssl_*` and
//! `peer_cert_*` fields stay null (the handshake's parameters are not recorded).

use charon_engine::{ChannelReport, ConnectionInfo, ConnectionReport, ConsumerReport, Listed, User, connection_info};
use serde_json::{Map, Value as JsonValue, json};

use crate::json::table_to_json;

/// The 0.9.1 protocol name, whose connections have channels (1.0 sessions are not shown).
pub(crate) const AMQP_091: &str = "AMQP 0-9-1";

/// Whether `user` sees a connection of `info.user` (and its channels and consumers).
pub(crate) fn sees(user: &User, info: &ConnectionInfo) -> bool {
    user.tags().is_monitor() || info.user == user.name
}

/// A connection as `/api/connections` lists it; `single` renders it as
/// `/api/connections/{name}` does (4.0.5 writes the unset TLS fields as `""` there, `null` in
/// lists). Without a `report` (the connection did not answer in time) its channels and state
/// are left out, as 4.0.5 leaves them out until a connection's first stats.
pub(crate) fn connection(listed: &Listed, report: Option<&ConnectionReport>, single: bool) -> JsonValue {
    let info = &listed.info;
    let unset = if single { json!("") } else { JsonValue::Null };
    let mut fields = Map::new();
    let mut put = |key: &str, value: JsonValue| {
        fields.insert(key.to_owned(), value);
    };
    put("auth_mechanism", info.auth_mechanism.clone().into());
    put("channel_max", info.channel_max.into());
    put("client_properties", table_to_json(&info.client_properties));
    put("connected_at", info.connected_at.into());
    put("frame_max", info.frame_max.into());
    put("host", connection_info::host(info.local.ip()).into());
    put("name", info.name().into());
    put("node", charon_engine::broker::node_name().into());
    for key in ["peer_cert_issuer", "peer_cert_subject", "peer_cert_validity"] {
        put(key, unset.clone());
    }
    put("peer_host", connection_info::host(info.peer.ip()).into());
    put("peer_port", info.peer.port().into());
    put("port", info.local.port().into());
    put("protocol", info.protocol.into());
    put("ssl", info.ssl.into());
    for key in ["ssl_cipher", "ssl_hash", "ssl_key_exchange", "ssl_protocol"] {
        put(key, unset.clone());
    }
    put("timeout", info.timeout.into());
    put("type", "network".into());
    put("user", info.user.clone().into());
    put("vhost", info.vhost.clone().into());
    // What RabbitMQ 4.0.5 shows only of 0.9.1 connections (from their stats, which its 1.0
    // connections do not emit).
    if info.protocol == AMQP_091 {
        if let Some(report) = report {
            put("channels", report.channels.len().into());
            put("state", report.state.into());
        }
        put("user_who_performed_action", info.user.clone().into());
        if let Some(name) = info.user_provided_name() {
            put("user_provided_name", name.into());
        }
    }
    JsonValue::Object(fields)
}

/// RabbitMQ's name for channel `number` of a connection: `"<connection> (<number>)"`.
pub(crate) fn channel_name(info: &ConnectionInfo, number: u32) -> String {
    format!("{} ({number})", info.name())
}

/// A channel as `/api/channels` lists it.
pub(crate) fn channel(listed: &Listed, report: &ConnectionReport, channel: &ChannelReport) -> JsonValue {
    let info = &listed.info;
    let mut rendered = json!({
        "acks_uncommitted": channel.acks_uncommitted,
        "confirm": channel.confirm,
        "connection_details": {
            "name": info.name(),
            "peer_host": connection_info::host(info.peer.ip()),
            "peer_port": info.peer.port(),
        },
        "consumer_count": channel.consumer_count,
        "messages_unacknowledged": channel.messages_unacknowledged,
        "messages_uncommitted": channel.messages_uncommitted,
        "messages_unconfirmed": channel.messages_unconfirmed,
        "name": channel_name(info, channel.number),
        "node": charon_engine::broker::node_name(),
        "number": channel.number,
        "prefetch_count": channel.prefetch_count,
        "state": report.state,
        "transactional": channel.transactional,
        "user": info.user,
        "user_who_performed_action": info.user,
        "vhost": info.vhost,
    });
    if channel.global_prefetch_count > 0
        && let Some(fields) = rendered.as_object_mut()
    {
        fields.insert("global_prefetch_count".into(), channel.global_prefetch_count.into());
    }
    rendered
}

/// A consumer as `/api/consumers` lists it; `connection` is its connection, when it is still
/// listed. A 1.0 consumer's `channel_details` is `[]`, as 4.0.5 shows it.
///
/// `timeout` is the consumer's delivery acknowledgement timeout in ms (the queue's, or the
/// broker's); rabbitmqadmin v2 needs the `consumer_timeout` field. With the timeout off
/// (`consumer_timeout = false`) the field is left out.
pub(crate) fn consumer(
    vhost: &str,
    queue: &str,
    consumer: &ConsumerReport,
    connection: Option<&Listed>,
    timeout: Option<i64>,
) -> JsonValue {
    let channel_details = match connection {
        Some(listed) if listed.info.protocol == AMQP_091 => json!({
            "connection_name": listed.info.name(),
            "name": channel_name(&listed.info, consumer.owner.channel),
            "node": charon_engine::broker::node_name(),
            "number": consumer.owner.channel,
            "peer_host": connection_info::host(listed.info.peer.ip()),
            "peer_port": listed.info.peer.port(),
            "user": listed.info.user,
        }),
        _ => json!([]),
    };
    let mut rendered = json!({
        "arguments": table_to_json(&consumer.arguments),
        "ack_required": consumer.ack_required,
        "active": consumer.active,
        "activity_status": consumer.activity_status,
        "channel_details": channel_details,
        "consumer_tag": consumer.tag,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch_count,
        "queue": {"name": queue, "vhost": vhost},
    });
    if let (Some(timeout), Some(fields)) = (timeout, rendered.as_object_mut()) {
        fields.insert("consumer_timeout".into(), timeout.into());
    }
    rendered
}
