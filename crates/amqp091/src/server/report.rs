//! What the management API sees of a 0.9.1 connection: its details, recorded in the broker's
//! registry once it is open, and its channels, reported only when asked (a
//! [`SessionEvent::Report`](charon_engine::SessionEvent::Report)), from the state the
//! connection keeps anyway.

use std::collections::HashMap;

use charon_engine::login::Peer;
use charon_engine::{ChannelReport, Client, ConnectionReport, Negotiated};

use super::channel::ChannelState;
use super::topology::arguments;
use crate::proto::{Connection, ConnectionState};

/// Records the open connection's details in the broker's registry.
pub(crate) fn describe(client: &Client, peer: &Peer, conn: &Connection, connected_at: i64) {
    client.describe(
        peer,
        connected_at,
        Negotiated {
            protocol: "AMQP 0-9-1",
            auth_mechanism: conn.mechanism().to_owned(),
            client_properties: arguments(conn.client_properties()),
            timeout: u32::try_from(conn.heartbeat_secs()).unwrap_or(u32::MAX),
            frame_max: conn.frame_max(),
            channel_max: u32::from(conn.channel_max()),
        },
    );
}

/// The connection's state and `channels`; `blocked` is the driver's publisher blocking
/// (`Some(true)`: an alarm, `Some(false)`: the store behind).
pub(crate) fn report(
    channels: &HashMap<u16, ChannelState>,
    conn: &Connection,
    blocked: Option<bool>,
) -> ConnectionReport {
    let state = match (conn.state(), blocked) {
        (ConnectionState::Closing | ConnectionState::Lingering | ConnectionState::Closed, _) => "closing",
        (_, Some(true)) => "blocked",
        (_, Some(false)) => "flow",
        _ => "running",
    };
    let mut reports: Vec<ChannelReport> = channels
        .iter()
        .map(|(number, state)| {
            let (uncommitted, acks) = state.tx.as_ref().map_or((0, 0), |tx| tx.held());
            ChannelReport {
                number: u32::from(*number),
                prefetch_count: state.consumer_prefetch,
                global_prefetch_count: state.global_limit.limit(),
                confirm: state.confirms.is_some(),
                transactional: state.tx.is_some(),
                consumer_count: u32::try_from(state.consumers.len()).unwrap_or(u32::MAX),
                messages_unacknowledged: state.unacked.count() as u64,
                messages_unconfirmed: state.confirms.as_ref().map_or(0, |c| c.unconfirmed()) as u64,
                messages_uncommitted: uncommitted as u64,
                acks_uncommitted: acks as u64,
            }
        })
        .collect();
    reports.sort_by_key(|c| c.number);
    ConnectionReport { state, channels: reports }
}
