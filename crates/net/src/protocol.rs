//! What a protocol adapter offers the driver.

use std::future::Future;
use std::time::Instant;

use bytes::BytesMut;

/// What the driver does after handing a protocol the broker's alarm state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlarmStep {
    /// Nothing changed: wait for the socket, the broker or a timer.
    Wait,
    /// The protocol produced output or events: act on them before waiting.
    Again,
    /// Reading resumed: feed the input already buffered (a held publish sits there, and no
    /// read will bring it again), then act.
    Refeed,
}

/// A protocol connection as the driver sees it: a sans-IO core with the broker session that
/// answers its events. Every method but the futures is synchronous and cheap; the futures may
/// await the engine (a queue's mailbox), never the socket, which only the driver touches.
pub trait Protocol: Send {
    /// The broker's alarm state, watched by the driver (publishers are held while it says so).
    type Alarm: Clone + Send + Sync + 'static;

    /// Whether the ACK of a read may wait up to [`crate::ACK_DELAY`] for the connection's
    /// next write to carry it, instead of going out at once (`TCP_QUICKACK`, see
    /// [`crate::Transport::after_read`]). A client with Nagle's algorithm on then sends what
    /// it wrote meanwhile in one segment instead of one segment per frame; a client that
    /// waits for an ACK the broker has no data to carry waits up to that delay, not the
    /// kernel's 40 ms.
    const DEFERS_ACKS: bool = false;

    /// Consumes what it can of a read batch, leaving an incomplete frame in `input`.
    fn on_input(&mut self, input: &mut BytesMut, now: Instant) -> impl Future<Output = ()> + Send;

    /// Acts on everything the core has queued for the broker (events, batched publishes),
    /// so that its output is complete for this wake-up.
    fn act(&mut self) -> impl Future<Output = ()> + Send;

    /// Applies the current alarm state.
    fn on_alarm(&mut self, alarm: &Self::Alarm, now: Instant) -> AlarmStep;

    /// Waits for engine events (deliveries, confirms, credit) and acts on them; `false` once
    /// the engine dropped the connection's mailbox. Must be cancel-safe: the driver polls it in
    /// a `select!`, so the only await is the receive and the handling runs without yielding.
    fn engine_events(&mut self) -> impl Future<Output = bool> + Send;

    /// Whether engine events may be taken now (the core's own outbound limits, e.g. transfers
    /// waiting for the client's session window). The driver adds its output high-water mark.
    fn taking_events(&self) -> bool {
        true
    }

    /// Whether the socket may be read (false while publishes are held by an alarm).
    fn reading(&self) -> bool {
        true
    }

    /// Bytes to write; the driver takes them all each wake-up.
    fn output(&mut self) -> &mut BytesMut;

    /// The driver wrote bytes at `now` (heartbeat bookkeeping).
    fn on_written(&mut self, now: Instant);

    /// When [`Self::on_timeout`] must run next.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Time passed: heartbeats, idle and handshake timeouts, closing deadlines.
    fn on_timeout(&mut self, now: Instant);

    /// The broker is shutting down: close with the protocol's "connection forced".
    fn on_shutdown(&mut self, now: Instant);

    /// The connection is finished; the driver ends once its output is written.
    fn is_closed(&self) -> bool;

    /// The socket is gone: release consumers, unsettled deliveries and exclusive queues.
    fn finish(&mut self) -> impl Future<Output = ()> + Send;
}
