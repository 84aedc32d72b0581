//! What one pass of a queue produces for the world outside it: events for sessions
//! (deliveries, confirmations, credit, cancellations), messages that left the queue other
//! than by acknowledgement (for dead lettering), and log records with the confirmations that
//! wait for them. The queue's state collects them; the task sends them after each pass.

use std::sync::Arc;

use charon_model::{DeathReason, Message};
use charon_store::segment_log::Record;

use super::dlx_pending::NUMBER_BIT as DLX_NUMBER_BIT;
use super::journal::{Journal, Mark};
use super::requests::ConfirmTo;
use super::unconfirmed::Removal;
use crate::session::{SessionEvent, SessionSink};

/// A message leaving the queue other than by acknowledgement, for dead lettering: why, and how
/// its log record goes once the dead letter is safe (`None`: it never had one in this queue).
#[derive(Debug)]
pub(crate) struct Discard {
    pub(crate) message: Arc<Message>,
    pub(crate) reason: DeathReason,
    pub(crate) removal: Option<Removal>,
}

/// Messages leaving the queue other than by acknowledgement, in order.
pub(crate) type Discarded = Vec<Discard>;

/// A dead letter this queue refused (full, `reject-publish`), which RabbitMQ drops silently:
/// the task passes it on to the fallback queue, with the source's confirm number so that the
/// source removes its message only once the fallback has the copy.
#[derive(Debug)]
pub(crate) struct RefusedDeadLetter {
    pub(crate) message: Arc<Message>,
    pub(crate) confirm: Option<(ConfirmTo, u64)>,
}

/// Events for sessions, as the task sends them.
pub(crate) type Events = Vec<(SessionSink, SessionEvent)>;

/// Messages an at-least-once queue kept as dead letters, with why they died (for the
/// dead-letter event stream).
pub(crate) type Held = Vec<(Arc<Message>, DeathReason)>;

/// The effects of one pass.
#[derive(Debug)]
pub(super) struct Effects {
    events: Events,
    discarded: Discarded,
    refused_dead_letters: Vec<RefusedDeadLetter>,
    held: Held,
    journal: Journal,
}

impl Effects {
    /// No effects yet, for queue `queue` (the log's key for its records).
    pub(super) fn new(queue: u64) -> Self {
        Self {
            events: Vec::new(),
            discarded: Vec::new(),
            refused_dead_letters: Vec::new(),
            held: Vec::new(),
            journal: Journal::new(queue),
        }
    }

    /// An event for a session, sent at the end of the pass.
    pub(super) fn send(&mut self, session: SessionSink, event: SessionEvent) {
        self.events.push((session, event));
    }

    /// A message left the queue unacknowledged, for `reason`: it may be dead-lettered. Its log
    /// record (`removal`) is removed by the task once the dead letter is safe.
    pub(super) fn discard(&mut self, message: Arc<Message>, reason: DeathReason, removal: Option<Removal>) {
        self.discarded.push(Discard { message, reason, removal });
    }

    /// A dead letter was refused (the queue is full): it is passed on, not answered.
    pub(super) fn refused_dead_letter(&mut self, message: Arc<Message>, confirm: Option<(ConfirmTo, u64)>) {
        self.refused_dead_letters.push(RefusedDeadLetter { message, confirm });
    }

    /// A message died and the queue keeps it as an at-least-once dead letter.
    pub(super) fn held(&mut self, message: Arc<Message>, reason: DeathReason) {
        self.held.push((message, reason));
    }

    /// The log records of this pass.
    pub(super) fn journal(&mut self) -> &mut Journal {
        &mut self.journal
    }

    /// Whether the journal persists anything.
    pub(super) fn journal_ref(&self) -> &Journal {
        &self.journal
    }

    /// Confirms a publish batch: at once when it wrote nothing the confirmation must wait for
    /// (`before`: the journal when the batch began; see [`Journal::holds`]), else once the log
    /// has this pass. Numbers with [`DLX_NUMBER_BIT`] are a queue's own dead letters.
    pub(super) fn confirm(&mut self, to: ConfirmTo, accepted: Vec<u64>, refused: Vec<u64>, before: Mark) {
        if accepted.is_empty() && refused.is_empty() {
            return;
        }
        let paced = accepted.iter().chain(&refused).any(|number| number & DLX_NUMBER_BIT == 0);
        let event = SessionEvent::Confirms { channel: to.channel, accepted, refused };
        if !self.journal.holds(before, paced) {
            self.send(to.session, event);
        } else {
            self.journal.hold(to.session, event);
        }
    }

    /// Takes the events to send.
    pub(super) fn take_events(&mut self) -> Events {
        std::mem::take(&mut self.events)
    }

    /// Takes the messages to dead-letter.
    pub(super) fn take_discarded(&mut self) -> Discarded {
        std::mem::take(&mut self.discarded)
    }

    /// Takes the dead letters refused in this pass.
    pub(super) fn take_refused_dead_letters(&mut self) -> Vec<RefusedDeadLetter> {
        std::mem::take(&mut self.refused_dead_letters)
    }

    /// Takes the messages kept as at-least-once dead letters in this pass.
    pub(super) fn take_held(&mut self) -> Held {
        std::mem::take(&mut self.held)
    }

    /// Takes the log records and the confirmations held for them.
    pub(super) fn take_journal(&mut self) -> (Vec<Record>, Events) {
        self.journal.take()
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Properties, Routing};

    use super::super::entry::Entry;
    use super::*;

    fn persistent() -> Arc<Message> {
        let mut m = Message::new(Routing::default(), Body::Data("m".into()));
        m.origin = charon_model::Origin::Amqp091;
        m.set_properties(Properties { delivery_mode: Some(2), ..Properties::default() });
        Arc::new(m)
    }

    #[test]
    fn a_confirmation_waits_for_the_log_only_when_its_batch_wrote_to_it() {
        let (session, _rx) = SessionSink::new(1, 0);
        let to = ConfirmTo { session, channel: 2 };
        let mut effects = Effects::new(4);
        let empty = effects.journal_ref().mark();
        effects.confirm(to.clone(), vec![], vec![], empty);
        assert!(effects.take_events().is_empty(), "nothing to confirm, nothing sent");
        effects.confirm(to.clone(), vec![1], vec![2], empty);
        assert!(matches!(
            effects.take_events().as_slice(),
            [(_, SessionEvent::Confirms { channel: 2, accepted, refused })] if accepted == &[1] && refused == &[2]
        ));
        effects.journal().enable();
        let before = effects.journal_ref().mark();
        effects.journal().enqueue(&Entry::new(1, persistent(), None, true), None);
        effects.confirm(to, vec![3], vec![], before);
        assert!(effects.take_events().is_empty());
        let (records, confirms) = effects.take_journal();
        assert_eq!((records.len(), confirms.len()), (1, 1));
    }

    #[test]
    fn discards_and_events_are_taken_in_order() {
        let (session, _rx) = SessionSink::new(1, 0);
        let mut effects = Effects::new(1);
        effects.discard(persistent(), DeathReason::Expired, None);
        effects.discard(persistent(), DeathReason::Maxlen, None);
        effects.send(session.clone(), SessionEvent::ConsumerCancelled { consumer: 1 });
        effects.send(session, SessionEvent::ConsumerCancelled { consumer: 2 });
        let reasons: Vec<DeathReason> = effects.take_discarded().into_iter().map(|d| d.reason).collect();
        assert_eq!(reasons, [DeathReason::Expired, DeathReason::Maxlen]);
        let cancelled: Vec<u64> = effects
            .take_events()
            .into_iter()
            .filter_map(|(_, e)| match e {
                SessionEvent::ConsumerCancelled { consumer } => Some(consumer),
                _ => None,
            })
            .collect();
        assert_eq!(cancelled, [1, 2]);
        assert!(effects.take_discarded().is_empty());
    }
}
