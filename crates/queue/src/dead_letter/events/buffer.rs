//! A vhost's dead-letter event buffer: queues offer events without waiting, one task publishes
//! them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use charon_model::Message;
use parking_lot::Mutex;
use tokio::sync::mpsc::{self, error::TrySendError};

use super::event::{DeadLetterEvent, Death, EVENTS_EXCHANGE};
use super::publisher::publish_events;
use crate::clock::now_ms;
use crate::dead_letter::route::Router;

/// The receiving end of the buffer and the routes its events go through, until the task that
/// publishes them starts.
type Pending = (mpsc::Receiver<DeadLetterEvent>, Arc<dyn Router>);

/// One vhost's dead-letter event stream, as the queues of the vhost see it.
pub struct DeadLetterEvents {
    vhost: String,
    /// Whether [`EVENTS_EXCHANGE`] has a binding: kept by the vhost's topology, read once per
    /// death.
    listened: Arc<AtomicBool>,
    tx: mpsc::Sender<DeadLetterEvent>,
    /// Taken when the publishing task starts (at the first event, inside the runtime).
    pending: Mutex<Option<Pending>>,
    started: AtomicBool,
    built: AtomicU64,
    dropped: AtomicU64,
}

impl std::fmt::Debug for DeadLetterEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetterEvents").field("vhost", &self.vhost).finish_non_exhaustive()
    }
}

impl DeadLetterEvents {
    /// The stream of `vhost`, built while `listened` is set, holding at most `capacity`
    /// events; they are published through `routes`.
    pub fn new(vhost: &str, listened: Arc<AtomicBool>, capacity: usize, routes: Arc<dyn Router>) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Self {
            vhost: vhost.to_owned(),
            listened,
            tx,
            pending: Mutex::new(Some((rx, routes))),
            started: AtomicBool::new(false),
            built: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether anything listens: the exchange has at least one binding.
    #[must_use]
    pub fn listened(&self) -> bool {
        self.listened.load(Ordering::Relaxed)
    }

    /// Events built since the vhost started.
    #[must_use]
    pub fn built(&self) -> u64 {
        self.built.load(Ordering::Relaxed)
    }

    /// Events dropped because the buffer was full (`charon_dead_letter_events_dropped_total`).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Reports one death: builds its event only while something listens, and never waits —
    /// a full buffer drops the event and counts it. The death of an event message itself is
    /// not reported, so that a queue of events that drops or expires them cannot feed itself.
    pub(crate) fn offer(&self, death: Death<'_>) {
        if !self.listened() || is_event(death.message) {
            return;
        }
        self.built.fetch_add(1, Ordering::Relaxed);
        let event = DeadLetterEvent::new(&self.vhost, death, now_ms());
        match self.tx.try_send(event) {
            Ok(()) => self.start(),
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.start();
            }
            // The publishing task only ends with the vhost.
            Err(TrySendError::Closed(_)) => {}
        }
    }

    /// Starts the publishing task once, from inside the runtime (a vhost can be created
    /// outside one; its queues always run inside).
    fn start(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut pending = self.pending.lock();
        if let Some((rx, routes)) = pending.take() {
            runtime.spawn(publish_events(rx, routes));
            self.started.store(true, Ordering::Release);
        }
    }
}

/// Whether `message` is a dead-letter event, or was one before it was dead-lettered.
fn is_event(message: &Message) -> bool {
    message.routing.exchange == EVENTS_EXCHANGE
        || message.broker.deaths.as_deref().is_some_and(|h| h.first.exchange == EVENTS_EXCHANGE)
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, DeathReason, Routing, Table};

    use super::*;
    use crate::QueueRef;

    struct Nowhere;

    impl Router for Nowhere {
        fn route(&self, _: &str, _: &Routing, _: &Table) -> Option<Vec<QueueRef>> {
            None
        }
    }

    fn events(capacity: usize, listened: bool) -> DeadLetterEvents {
        DeadLetterEvents::new("/", Arc::new(AtomicBool::new(listened)), capacity, Arc::new(Nowhere))
    }

    fn death(message: &Message) -> Death<'_> {
        Death { queue: "q", message, reason: DeathReason::Expired, dead_letter_exchange: None, drop_reason: None }
    }

    fn message(exchange: &str) -> Message {
        Message::new(Routing { exchange: exchange.into(), ..Routing::default() }, Body::Data("m".into()))
    }

    #[test]
    fn a_full_buffer_drops_and_counts_without_waiting() {
        // Outside a runtime nothing drains the buffer: the third offer finds it full.
        let events = events(2, true);
        let m = message("x");
        for _ in 0..5 {
            events.offer(death(&m));
        }
        assert_eq!((events.built(), events.dropped()), (5, 3));
    }

    #[test]
    fn nothing_is_built_while_nothing_listens() {
        let events = events(2, false);
        events.offer(death(&message("x")));
        assert_eq!((events.built(), events.dropped()), (0, 0));
        events.listened.store(true, Ordering::Relaxed);
        events.offer(death(&message("x")));
        assert_eq!(events.built(), 1);
    }

    #[test]
    fn the_death_of_an_event_is_not_reported() {
        let events = events(2, true);
        events.offer(death(&message(EVENTS_EXCHANGE)));
        let copy = crate::dead_letter::dead_lettered_copy(
            &message(EVENTS_EXCHANGE),
            "q",
            DeathReason::Expired,
            "dlx",
            None,
            1,
        );
        events.offer(death(&copy));
        assert_eq!(events.built(), 0);
    }
}
