//! The management API's runtime objects and node endpoints: connections, channels and
//! consumers (their fields, who sees them, closing a connection with `X-Reason`), the
//! overview, nodes, the listener and vhost health checks and the aliveness test, as RabbitMQ
//! 4.0.5 answers them. RabbitMQ refreshes connection and channel stats every 5 s, so the cases
//! poll until their own connection (found by a unique `connection_name`) shows up.
// Reading `serde_json::Value` by `[key]` or `[index]` never panics (a missing entry reads as
// `null`), and it keeps the field checks readable.
#![allow(clippy::indexing_slicing)]

use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};
use serde_json::{Value, json};

use crate::admin::{HttpResponse, request, request_with_headers, segment};
use crate::broker::Broker;
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, case, check, check_eq};

/// How long a case waits for the stats it looks for (RabbitMQ emits them every 5 s).
const STATS_WAIT: Duration = Duration::from_secs(15);

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "management.connection_fields",
            "GET /api/connections lists a 0.9.1 connection with RabbitMQ's fields: name 'peer -> local', protocol 'AMQP 0-9-1', type network, user, vhost, PLAIN, user_provided_name from connection_name, channels, state running; GET /api/connections/{name} shows it with unset TLS fields as \"\"",
            ["management"],
            connection_fields
        )
        .timeout(30),
        case!(
            "management.channels_of_a_connection",
            "GET /api/connections/{name}/channels and /api/channels/{name} show each channel's number, prefetch_count, confirm and consumer_count, and the channel's consumer_details",
            ["management"],
            channels_of_a_connection
        )
        .timeout(30),
        case!(
            "management.consumers",
            "GET /api/consumers/{vhost} lists a consumer with its queue, consumer_tag, ack_required, prefetch_count, exclusive, active, activity_status 'up', arguments, consumer_timeout and channel_details",
            ["management"],
            consumers
        )
        .timeout(30),
        case!(
            "management.delete_connection_closes_with_reason",
            "DELETE /api/connections/{name} answers 204 and closes the connection with 320 'CONNECTION_FORCED - <X-Reason>', or 'Closed via management plugin' without the header",
            ["management"],
            delete_connection_closes_with_reason
        )
        .timeout(45),
        case!(
            "management.connection_tag_rules",
            "a management user sees only its own connections and gets 401 'User not authorised to access object' for another's; a monitoring user sees them all but may not DELETE one (401)",
            ["management", "access"],
            connection_tag_rules
        )
        .timeout(30),
        case!(
            "management.unknown_runtime_objects_404",
            "GET of an unknown connection or channel, DELETE of an unknown connection, and the connections, channels and consumers of an unknown vhost answer 404 Object Not Found",
            ["management"],
            unknown_runtime_objects_404
        ),
        case!(
            "management.listener_health_checks",
            "health checks: port-listener/{amqp port} 200 {status ok, port}; an unused port 503 'No active listener' with missing and ports; a non-number 400 'Invalid port'; protocol-listener/amqp091 200 {protocol amqp}; an unknown protocol 503 with missing and protocols",
            ["management", "health"],
            listener_health_checks
        ),
        case!(
            "management.vhost_and_quorum_health_checks",
            "health checks virtual-hosts ({status ok}, for any management user) and node-is-quorum-critical ({status ok, reason 'single node cluster'})",
            ["management", "health"],
            vhost_and_quorum_health_checks
        ),
        case!(
            "management.aliveness_test",
            "GET /api/aliveness-test/{vhost} declares aliveness-test, publishes and gets a message: 200 {status ok}; an unknown vhost 404",
            ["management", "health"],
            aliveness_test
        ),
        case!(
            "management.overview",
            "GET /api/overview: versions, product_name RabbitMQ, node, cluster_name, exchange_types, object_totals and queue_totals as numbers, the AMQP listener; a management user gets no listeners, node or consumer total",
            ["management"],
            overview
        ),
        case!(
            "management.nodes",
            "GET /api/nodes (monitors only; others 401 'Not monitor user') lists the node with running, type disc, memory and disk measurements, their alarms, fd_total, uptime; /api/nodes/{name} the same node; an unknown node 404",
            ["management"],
            nodes
        ),
        case!(
            "management.amqp10_connection_and_consumer",
            "an AMQP 1.0 connection is listed with protocol 'AMQP 1-0' and without channels or state (4.0.5 shows no stats for it), no channels; its receiver is a consumer whose consumer_tag is the link handle and whose channel_details is []",
            ["management", "amqp10"],
            amqp10_connection_and_consumer
        )
        .timeout(30),
        case!(
            "management.cluster_name_and_extensions",
            "GET /api/cluster-name answers {name} (the overview's cluster_name) and /api/extensions an array",
            ["management"],
            cluster_name_and_extensions
        ),
    ]
}

/// One request as `who`, with the body parsed (`null` when empty).
async fn call(who: &Broker, method: &str, path: &str) -> Result<(u16, Value), CaseError> {
    let response = request(&who.http, method, path, (&who.user, &who.password), None).await?;
    Ok((response.status, parse(&response)))
}

fn parse(response: &HttpResponse) -> Value {
    serde_json::from_str(&response.body).unwrap_or(Value::Null)
}

/// A lapin connection as `who`, named `connection_name`.
async fn connect(who: &Broker, connection_name: &str) -> Result<Connection, CaseError> {
    let properties = ConnectionProperties::default().with_connection_name(connection_name.into());
    Ok(Connection::connect(&who.url_with_vhost(&who.vhost), properties).await?)
}

/// Polls `GET path` as `who` until an object with `user_provided_name == connection_name`
/// satisfies `ready` (or the connection's own name, for channels: `connection_details.name`).
async fn wait_listed(who: &Broker, path: &str, ready: impl Fn(&Value) -> bool) -> Result<Value, CaseError> {
    let deadline = tokio::time::Instant::now() + STATS_WAIT;
    loop {
        let (status, listed) = call(who, "GET", path).await?;
        check_eq!(status, 200, "GET {path}: {listed}");
        if let Some(found) = listed.as_array().and_then(|items| items.iter().find(|c| ready(c))) {
            return Ok(found.clone());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CaseError::new(format!("GET {path}: never listed what the case waits for: {listed}")));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Our connection as `/api/connections` lists it, once its stats show `channels` channels.
async fn our_connection(who: &Broker, connection_name: &str, channels: u64) -> Result<Value, CaseError> {
    wait_listed(who, "/api/connections", |c| {
        c["user_provided_name"] == connection_name && c["channels"].as_u64() == Some(channels)
    })
    .await
}

/// A connection with two channels: 1 with prefetch 7 and a consumer (tag `tag`, x-priority 3)
/// on `queue`, 2 in confirm mode.
async fn busy_connection(
    ctx: &Ctx,
    connection_name: &str,
    queue: &str,
    tag: &str,
) -> Result<(Connection, Channel, Channel, lapin::Consumer), CaseError> {
    let conn = connect(ctx.broker(), connection_name).await?;
    let first = conn.create_channel().await?;
    lk::declare_queue(&first, queue).await?;
    first.basic_qos(7, BasicQosOptions::default()).await?;
    let mut arguments = FieldTable::default();
    arguments.insert("x-priority".into(), AMQPValue::LongInt(3));
    // Kept by the caller: lapin cancels a consumer it drops.
    let consumer = first.basic_consume(queue.into(), tag.into(), BasicConsumeOptions::default(), arguments).await?;
    let second = conn.create_channel().await?;
    second.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok((conn, first, second, consumer))
}

async fn connection_fields(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let name = ctx.name("conn");
    let queue = ctx.queue("q");
    let (_conn, _first, _second, _consumer) = busy_connection(&ctx, &name, &queue, &ctx.name("ctag")).await?;
    let c = our_connection(b, &name, 2).await?;
    for (key, expected) in [
        ("protocol", json!("AMQP 0-9-1")),
        ("type", json!("network")),
        ("user", json!(b.user)),
        ("vhost", json!(b.vhost)),
        ("auth_mechanism", json!("PLAIN")),
        ("user_provided_name", json!(name)),
        ("state", json!("running")),
        ("ssl", json!(false)),
        ("ssl_cipher", Value::Null),
        ("peer_cert_subject", Value::Null),
        ("port", json!(b.port)),
        ("channel_max", json!(2047)),
        ("frame_max", json!(131_072)),
    ] {
        check_eq!(c[key].clone(), expected, "connection field {key}");
    }
    check_eq!(c["client_properties"]["connection_name"].clone(), json!(name), "client_properties.connection_name");
    check!(c["client_properties"]["capabilities"].is_object(), "client_properties.capabilities: {c}");
    let expected = format!(
        "{}:{} -> {}:{}",
        c["peer_host"].as_str().unwrap_or_default(),
        c["peer_port"],
        c["host"].as_str().unwrap_or_default(),
        c["port"]
    );
    check_eq!(c["name"].as_str(), Some(expected.as_str()), "name");
    check!(
        c["node"].is_string() && c["connected_at"].is_u64() && c["timeout"].is_u64(),
        "node, connected_at, timeout: {c}"
    );
    let path = format!("/api/connections/{}", segment(c["name"].as_str().unwrap_or_default()));
    let (status, one) = call(b, "GET", &path).await?;
    check_eq!(status, 200, "GET {path}: {one}");
    check_eq!(one["name"].clone(), c["name"].clone(), "single connection name");
    check_eq!(
        (one["ssl_cipher"].clone(), one["peer_cert_issuer"].clone()),
        (json!(""), json!("")),
        "unset TLS fields of one connection"
    );
    check_eq!(one["user_provided_name"].clone(), json!(name), "single user_provided_name");
    Ok(())
}

async fn channels_of_a_connection(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let name = ctx.name("conn");
    let (queue, tag) = (ctx.queue("q"), ctx.name("ctag"));
    let (_conn, _first, _second, _consumer) = busy_connection(&ctx, &name, &queue, &tag).await?;
    let c = our_connection(b, &name, 2).await?;
    let connection = c["name"].as_str().unwrap_or_default().to_owned();
    let path = format!("/api/connections/{}/channels", segment(&connection));
    let first = wait_listed(b, &path, |ch| ch["number"] == 1 && ch["consumer_count"] == 1).await?;
    let second = wait_listed(b, &path, |ch| ch["number"] == 2).await?;
    check_eq!(first["name"].clone(), json!(format!("{connection} (1)")), "channel name");
    check_eq!(
        (first["prefetch_count"].clone(), first["confirm"].clone(), first["transactional"].clone()),
        (json!(7), json!(false), json!(false)),
        "channel 1"
    );
    check_eq!((second["prefetch_count"].clone(), second["confirm"].clone()), (json!(0), json!(true)), "channel 2");
    check_eq!(first["connection_details"]["name"].as_str(), Some(connection.as_str()), "connection_details.name");
    check_eq!(first["connection_details"]["peer_port"].clone(), c["peer_port"].clone(), "connection_details.peer_port");
    for key in ["user", "vhost", "state", "messages_unacknowledged", "messages_unconfirmed", "acks_uncommitted"] {
        check!(!first[key].is_null(), "channel field {key}: {first}");
    }
    let path = format!("/api/channels/{}", segment(&format!("{connection} (1)")));
    let (status, one) = call(b, "GET", &path).await?;
    check_eq!(status, 200, "GET {path}: {one}");
    check_eq!(one["consumer_details"][0]["consumer_tag"].as_str(), Some(tag.as_str()), "consumer_details: {one}");
    let all = wait_listed(b, "/api/channels", |ch| ch["name"] == format!("{connection} (2)")).await?;
    check_eq!(all["number"].clone(), json!(2), "channel 2 in /api/channels");
    let vhost = format!("/api/vhosts/{}/channels", segment(&b.vhost));
    wait_listed(b, &vhost, |ch| ch["name"] == format!("{connection} (1)")).await?;
    Ok(())
}

async fn consumers(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let name = ctx.name("conn");
    let (queue, tag) = (ctx.queue("q"), ctx.name("ctag"));
    let (_conn, _first, _second, _consumer) = busy_connection(&ctx, &name, &queue, &tag).await?;
    let c = our_connection(b, &name, 2).await?;
    let path = format!("/api/consumers/{}", segment(&b.vhost));
    let found = wait_listed(b, &path, |x| x["consumer_tag"] == tag.as_str()).await?;
    for (key, expected) in [
        ("queue", json!({"name": queue, "vhost": b.vhost})),
        ("ack_required", json!(true)),
        ("prefetch_count", json!(7)),
        ("exclusive", json!(false)),
        ("active", json!(true)),
        ("activity_status", json!("up")),
        ("arguments", json!({"x-priority": 3})),
        // The broker's default (30 minutes): the queue sets none. rabbitmqadmin needs it.
        ("consumer_timeout", json!(1_800_000)),
    ] {
        check_eq!(found[key].clone(), expected, "consumer field {key}");
    }
    let details = &found["channel_details"];
    check_eq!(details["connection_name"].clone(), c["name"].clone(), "channel_details.connection_name");
    check_eq!((details["number"].clone(), details["user"].clone()), (json!(1), json!(b.user)), "channel_details");
    check_eq!(
        details["name"].clone(),
        json!(format!("{} (1)", c["name"].as_str().unwrap_or_default())),
        "channel_details.name"
    );
    wait_listed(b, "/api/consumers", |x| x["consumer_tag"] == tag.as_str()).await?;
    Ok(())
}

/// Closes our connection `connection_name` through the API, with `reason` as `X-Reason`; the
/// reply code and text the client gets.
async fn close_through_api(ctx: &Ctx, connection_name: &str, reason: Option<&str>) -> Result<(u16, String), CaseError> {
    let b = ctx.broker();
    let conn = connect(b, connection_name).await?;
    let _channel = conn.create_channel().await?;
    let c = our_connection(b, connection_name, 1).await?;
    let path = format!("/api/connections/{}", segment(c["name"].as_str().unwrap_or_default()));
    let mut events = Box::pin(conn.events_listener());
    let headers: Vec<(&str, &str)> = reason.map(|r| ("X-Reason", r)).into_iter().collect();
    let response = request_with_headers(&b.http, "DELETE", &path, (&b.user, &b.password), None, &headers).await?;
    check_eq!(response.status, 204, "DELETE {path}: {}", response.body);
    let error = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.next().await {
                Some(lapin::Event::Error(error)) => return Some(error),
                Some(_) => {}
                None => return None,
            }
        }
    })
    .await
    .map_err(|_| CaseError::new("the connection was not closed by the broker"))?
    .ok_or_else(|| CaseError::new("the connection's events ended without an error"))?;
    lk::amqp_error(&error).ok_or_else(|| CaseError::new(format!("not a broker close: {error}")))
}

async fn delete_connection_closes_with_reason(ctx: Ctx) -> CaseResult {
    let closed = close_through_api(&ctx, &ctx.name("conn"), Some("maintenance window")).await?;
    check_eq!(closed, (320, "CONNECTION_FORCED - maintenance window".to_owned()), "close with X-Reason");
    let closed = close_through_api(&ctx, &ctx.name("conn2"), None).await?;
    check_eq!(closed, (320, "CONNECTION_FORCED - Closed via management plugin".to_owned()), "close without X-Reason");
    Ok(())
}

async fn connection_tag_rules(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let name = ctx.name("conn");
    let conn = connect(b, &name).await?;
    let _channel = conn.create_channel().await?;
    let c = our_connection(b, &name, 1).await?;
    let path = format!("/api/connections/{}", segment(c["name"].as_str().unwrap_or_default()));
    let manager = ctx.user_with("management", Some((".*", ".*", ".*"))).await?;
    let monitor = ctx.user_with("monitoring", Some((".*", ".*", ".*"))).await?;
    // The monitor sees it (once its stats are in).
    wait_listed(&monitor, "/api/connections", |x| x["user_provided_name"] == name.as_str()).await?;
    let (status, listed) = call(&manager, "GET", "/api/connections").await?;
    check_eq!(status, 200, "GET /api/connections as a management user");
    check!(
        listed.as_array().is_some_and(|items| items.iter().all(|x| x["user"] == manager.user.as_str())),
        "a management user sees only its own connections: {listed}"
    );
    let refused = json!({"error": "not_authorised", "reason": "User not authorised to access object"});
    check_eq!(call(&manager, "GET", &path).await?, (401, refused.clone()), "GET another user's connection");
    check_eq!(call(&monitor, "GET", &path).await?.0, 200, "a monitor GETs any connection");
    check_eq!(call(&monitor, "DELETE", &path).await?, (401, refused.clone()), "a monitor DELETEs a connection");
    check_eq!(call(&manager, "DELETE", &path).await?, (401, refused), "a management user DELETEs another's");
    // The management user's own connection is visible to it.
    let own = ctx.name("own");
    let mine = connect(&manager, &own).await?;
    let _ch = mine.create_channel().await?;
    wait_listed(&manager, "/api/connections", |x| x["user_provided_name"] == own.as_str()).await?;
    Ok(())
}

async fn unknown_runtime_objects_404(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let missing = json!({"error": "Object Not Found", "reason": "Not Found"});
    let unknown = segment("127.0.0.1:1 -> 127.0.0.1:2");
    for (method, path) in [
        ("GET", format!("/api/connections/{unknown}")),
        ("DELETE", format!("/api/connections/{unknown}")),
        ("GET", format!("/api/channels/{}", segment("127.0.0.1:1 -> 127.0.0.1:2 (1)"))),
        ("GET", "/api/vhosts/no-such-vhost-here/connections".to_owned()),
        ("GET", "/api/vhosts/no-such-vhost-here/channels".to_owned()),
        ("GET", "/api/consumers/no-such-vhost-here".to_owned()),
    ] {
        check_eq!(call(b, method, &path).await?, (404, missing.clone()), "{method} {path}");
    }
    Ok(())
}

async fn listener_health_checks(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let base = "/api/health/checks";
    let (status, body) = call(b, "GET", &format!("{base}/port-listener/{}", b.port)).await?;
    check_eq!((status, body), (200, json!({"status": "ok", "port": b.port})), "port-listener of the AMQP port");
    let (status, body) = call(b, "GET", &format!("{base}/port-listener/1")).await?;
    check_eq!(status, 503, "an unused port: {body}");
    check_eq!(
        (body["status"].clone(), body["reason"].clone(), body["missing"].clone()),
        (json!("failed"), json!("No active listener"), json!(1)),
        "unused port body"
    );
    check!(body["ports"].as_array().is_some_and(|p| p.contains(&json!(b.port))), "ports list the AMQP port: {body}");
    let invalid = json!({"error": "bad_request", "reason": "Invalid port"});
    check_eq!(
        call(b, "GET", &format!("{base}/port-listener/abc")).await?,
        (400, invalid),
        "a port that is not a number"
    );
    for name in ["amqp", "amqp091", "amqp0-9-1"] {
        let got = call(b, "GET", &format!("{base}/protocol-listener/{name}")).await?;
        check_eq!(got, (200, json!({"status": "ok", "protocol": "amqp"})), "protocol-listener/{name}");
    }
    let (status, body) = call(b, "GET", &format!("{base}/protocol-listener/nonesuch")).await?;
    check_eq!(status, 503, "unknown protocol: {body}");
    check_eq!(
        (body["reason"].clone(), body["missing"].clone()),
        (json!("No active listener"), json!("nonesuch")),
        "unknown protocol body"
    );
    check!(body["protocols"].as_array().is_some_and(|p| p.contains(&json!("amqp"))), "protocols list amqp: {body}");
    Ok(())
}

async fn vhost_and_quorum_health_checks(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let manager = ctx.user_with("management", Some((".*", ".*", ".*"))).await?;
    let got = call(&manager, "GET", "/api/health/checks/virtual-hosts").await?;
    check_eq!(got, (200, json!({"status": "ok"})), "virtual-hosts");
    let got = call(b, "GET", "/api/health/checks/node-is-quorum-critical").await?;
    check_eq!(got, (200, json!({"status": "ok", "reason": "single node cluster"})), "node-is-quorum-critical");
    Ok(())
}

async fn aliveness_test(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    ctx.track_queue("aliveness-test");
    let got = call(b, "GET", &format!("/api/aliveness-test/{}", segment(&b.vhost))).await?;
    check_eq!(got, (200, json!({"status": "ok"})), "aliveness-test");
    let missing = json!({"error": "Object Not Found", "reason": "Not Found"});
    check_eq!(call(b, "GET", "/api/aliveness-test/no-such-vhost-here").await?, (404, missing), "unknown vhost");
    Ok(())
}

async fn overview(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let (status, o) = call(b, "GET", "/api/overview").await?;
    check_eq!(status, 200, "GET /api/overview: {o}");
    check_eq!(
        (o["product_name"].clone(), o["rabbitmq_version"].clone()),
        (json!("RabbitMQ"), json!("4.0.5")),
        "product"
    );
    check_eq!(
        (o["management_version"].clone(), o["product_version"].clone()),
        (json!("4.0.5"), json!("4.0.5")),
        "versions"
    );
    check!(o["node"].is_string() && o["cluster_name"].is_string(), "node and cluster_name: {o}");
    for key in ["connections", "channels", "queues", "exchanges", "consumers"] {
        check!(o["object_totals"][key].is_u64(), "object_totals.{key}: {o}");
    }
    for key in ["messages", "messages_ready", "messages_unacknowledged"] {
        check!(o["queue_totals"][key].is_u64(), "queue_totals.{key}: {o}");
    }
    let names: Vec<&str> = o["exchange_types"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    for kind in ["direct", "fanout", "headers", "topic"] {
        check!(names.contains(&kind), "exchange_types has {kind}: {names:?}");
    }
    let amqp =
        o["listeners"].as_array().and_then(|l| l.iter().find(|x| x["protocol"] == "amqp" && x["port"] == b.port));
    check!(
        amqp.is_some_and(|l| l["node"] == o["node"] && l["ip_address"].is_string()),
        "the AMQP listener: {}",
        o["listeners"]
    );
    check!(o["contexts"].is_array() && o["message_stats"].is_object(), "contexts and message_stats: {o}");
    let manager = ctx.user_with("management", Some((".*", ".*", ".*"))).await?;
    let (status, theirs) = call(&manager, "GET", "/api/overview").await?;
    check_eq!(status, 200, "overview as a management user: {theirs}");
    check!(
        theirs.get("listeners").is_none() && theirs.get("node").is_none() && theirs.get("contexts").is_none(),
        "no node, listeners or contexts for a management user: {theirs}"
    );
    check!(
        theirs["object_totals"].get("consumers").is_none() && theirs["object_totals"]["queues"].is_u64(),
        "a management user's object_totals: {}",
        theirs["object_totals"]
    );
    Ok(())
}

async fn nodes(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let (status, nodes) = call(b, "GET", "/api/nodes").await?;
    check_eq!(status, 200, "GET /api/nodes: {nodes}");
    let node = &nodes[0];
    check_eq!((node["running"].clone(), node["type"].clone()), (json!(true), json!("disc")), "running and type");
    for key in ["mem_used", "mem_limit", "disk_free", "disk_free_limit", "fd_total", "uptime"] {
        check!(node[key].is_u64(), "node {key}: {node}");
    }
    for key in ["mem_alarm", "disk_free_alarm"] {
        check!(node[key].is_boolean(), "node {key}: {node}");
    }
    let (_, overview) = call(b, "GET", "/api/overview").await?;
    check_eq!(node["name"].clone(), overview["node"].clone(), "the node is the overview's");
    let name = node["name"].as_str().unwrap_or_default();
    let (status, one) = call(b, "GET", &format!("/api/nodes/{}", segment(name))).await?;
    check_eq!((status, one["name"].clone()), (200, json!(name)), "GET /api/nodes/{name}");
    let missing = json!({"error": "Object Not Found", "reason": "Not Found"});
    check_eq!(call(b, "GET", "/api/nodes/rabbit%40nowhere").await?, (404, missing), "unknown node");
    let manager = ctx.user_with("management", Some((".*", ".*", ".*"))).await?;
    let refused = json!({"error": "not_authorised", "reason": "Not monitor user"});
    check_eq!(call(&manager, "GET", "/api/nodes").await?, (401, refused), "nodes as a management user");
    Ok(())
}

async fn cluster_name_and_extensions(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let (status, name) = call(b, "GET", "/api/cluster-name").await?;
    let (_, overview) = call(b, "GET", "/api/overview").await?;
    check_eq!((status, name["name"].clone()), (200, overview["cluster_name"].clone()), "cluster-name");
    let (status, extensions) = call(b, "GET", "/api/extensions").await?;
    check!(status == 200 && extensions.is_array(), "extensions: {status} {extensions}");
    Ok(())
}

async fn amqp10_connection_and_consumer(ctx: Ctx) -> CaseResult {
    use fe2o3_amqp::sasl_profile::SaslProfile;
    use fe2o3_amqp::session::Session;
    use fe2o3_amqp::{Connection as Connection10, Receiver};

    let b = ctx.broker();
    let q = ctx.queue("q");
    let (_c, ch) = ctx.lapin_channel().await?;
    lk::declare_queue(&ch, &q).await?;
    let user = ctx.user_with("", Some((".*", ".*", ".*"))).await?;
    let hostname = format!("vhost:{}", user.vhost);
    let mut conn = Connection10::builder()
        .container_id(ctx.name("c"))
        .hostname(hostname.as_str())
        .sasl_profile(SaslProfile::Plain { username: user.user.clone(), password: user.password.clone() })
        .open(format!("amqp://{}", user.addr()).as_str())
        .await
        .map_err(|e| CaseError::new(format!("amqp 1.0 open: {e:?}")))?;
    let mut session = Session::begin(&mut conn).await.map_err(|e| CaseError::new(format!("begin: {e:?}")))?;
    let receiver = Receiver::builder()
        .name(ctx.name("receiver"))
        .source(crate::fe2o3_kit::queue_addr(&q))
        .attach(&mut session)
        .await
        .map_err(|e| CaseError::new(format!("attach: {e:?}")))?;
    let outcome = async {
        let c = wait_listed(b, "/api/connections", |c| c["user"] == user.user.as_str()).await?;
        check_eq!(
            (c["protocol"].clone(), c["type"].clone()),
            (json!("AMQP 1-0"), json!("network")),
            "protocol and type"
        );
        check_eq!(
            (c["auth_mechanism"].clone(), c["vhost"].clone()),
            (json!("PLAIN"), json!(user.vhost)),
            "mechanism and vhost"
        );
        check!(c.get("channels").is_none() && c.get("state").is_none(), "no channels or state for 1.0: {c}");
        let path = format!("/api/connections/{}/channels", segment(c["name"].as_str().unwrap_or_default()));
        check_eq!(call(b, "GET", &path).await?, (200, json!([])), "channels of a 1.0 connection");
        let consumers = format!("/api/consumers/{}", segment(&b.vhost));
        let found = wait_listed(b, &consumers, |x| x["queue"]["name"] == q.as_str()).await?;
        check_eq!(found["channel_details"].clone(), json!([]), "channel_details of a 1.0 consumer");
        check_eq!(found["consumer_tag"].clone(), json!("0"), "consumer_tag: the link handle");
        check_eq!(
            (found["ack_required"].clone(), found["active"].clone()),
            (json!(true), json!(true)),
            "ack_required and active"
        );
        Ok(())
    }
    .await;
    let _ = receiver.close().await;
    let _ = session.end().await;
    let _ = conn.close().await;
    outcome
}
