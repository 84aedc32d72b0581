//! The dead-lettered copy of a message and RabbitMQ's cycle rule (`rabbit_dead_letter` and
//! `mc:is_death_cycle/2` in 4.0.5): pure functions of the message and its death history.

use charon_model::{DeathHistory, DeathReason, DeathRecord, Encoded, Message, Value};

/// The copy of `message` that leaves `queue` for the dead-letter exchange.
#[must_use]
pub fn dead_lettered_copy(
    message: &Message,
    queue: &str,
    reason: DeathReason,
    exchange: &str,
    routing_key: Option<&str>,
    now: i64,
) -> Message {
    let mut copy = message.clone();
    let keys = copy.routing.visible_keys();
    // What the refusing consumer said goes into the history, never further with the message.
    let refusal = copy.broker.refusal.take();
    let record = DeathRecord {
        queue,
        reason,
        exchange: &copy.routing.exchange,
        routing_keys: &keys,
        ttl: copy.properties().ttl,
        now,
        cause: refusal.as_ref(),
    };
    // A history carried in client headers (`x-death`) is opaque since RabbitMQ 4.0: only the
    // broker's own record counts, and rendering replaces the header.
    match copy.broker.deaths.as_deref_mut() {
        Some(history) => history.record(&record),
        None => copy.broker.deaths = Some(Box::new(DeathHistory::new(&record))),
    }
    if copy.properties().ttl.is_some() {
        copy.properties_mut().ttl = None;
    }
    copy.routing.exchange = exchange.to_owned();
    if let Some(key) = routing_key {
        copy.routing.routing_key = key.to_owned();
        copy.routing.cc.clear();
        copy.routing.bcc.clear();
    }
    // The failed-delivery count a quorum queue put on the message travels with the dead letter
    // (`rabbit_fifo:annotate_msg/2` sets the `delivery_count` annotation, which 1.0 consumers see
    // as `header.delivery-count`); the acquired count is queue-internal and does not.
    copy.broker.acquired_count = 0;
    // A delay belonged to the queue the message left (one that dies while delayed — dropped,
    // expired — is not delayed again in its targets).
    copy.broker.not_before = None;
    // 0.9.1 property bytes no longer match (expiration and x-death change); a 1.0 bare message
    // is immutable and stays as it was, the history going into its annotations.
    if matches!(copy.encoded, Encoded::Amqp091Properties(_)) {
        copy.encoded = Encoded::None;
    }
    copy
}

/// The headers a headers exchange sees for a dead letter: the message's own headers plus the
/// `x-first-death-*` and `x-last-death-*` fields (RabbitMQ routes on its annotations too).
pub(super) fn routing_headers(message: &Message) -> charon_model::Table {
    let mut headers = message.headers.clone();
    if let Some(history) = message.broker.deaths.as_deref() {
        for (key, value) in history.summary_fields() {
            headers.insert(key, Value::long_str(&value));
        }
    }
    headers
}

/// RabbitMQ's cycle rule (`mc:is_death_cycle/2`, applied for every reason but `rejected`): walk
/// the history, most recent first, to the first death in `target`; it is a cycle when no death
/// up to and including that one was a rejection.
#[must_use]
pub fn is_cycle(history: &DeathHistory, target: &str) -> bool {
    let Some(position) = history.entries.iter().position(|d| d.queue == target) else {
        return false;
    };
    history.entries.iter().take(position + 1).all(|d| d.reason != DeathReason::Rejected)
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Properties, Routing};

    use super::*;

    fn message() -> Message {
        let routing =
            Routing { exchange: "x".into(), routing_key: "k".into(), cc: vec!["c".into()], bcc: vec!["b".into()] };
        let mut m = Message::new(routing, Body::Data("body".into()));
        m.set_properties(Properties { ttl: Some(500), priority: Some(3), ..Properties::default() });
        m
    }

    #[test]
    fn copy_records_the_death_clears_ttl_and_takes_the_dlx() {
        let copy = dead_lettered_copy(&message(), "q", DeathReason::Rejected, "dlx", None, 1_000);
        let history = copy.broker.deaths.as_deref().unwrap();
        let death = history.entries.first().unwrap();
        assert_eq!(
            (death.queue.as_str(), death.exchange.as_str(), death.routing_keys.clone(), death.original_ttl),
            ("q", "x", vec!["k".to_owned(), "c".to_owned()], Some(500))
        );
        assert_eq!(copy.properties().ttl, None);
        assert_eq!(copy.properties().priority, Some(3));
        assert_eq!(copy.routing.exchange, "dlx");
        assert_eq!(copy.routing.all_keys().collect::<Vec<_>>(), ["k", "c", "b"]);
    }

    #[test]
    fn the_failed_delivery_count_travels_with_the_dead_letter() {
        let mut m = message();
        m.broker.delivery_count = 2;
        m.broker.acquired_count = 3;
        let copy = dead_lettered_copy(&m, "q", DeathReason::Rejected, "dlx", None, 1);
        assert_eq!((copy.broker.delivery_count, copy.broker.acquired_count), (2, 0));
    }

    #[test]
    fn a_dead_letter_is_not_delayed_in_its_targets() {
        let mut m = message();
        m.broker.not_before = Some(9_000);
        let copy = dead_lettered_copy(&m, "q", DeathReason::Expired, "dlx", None, 1);
        assert_eq!(copy.broker.not_before, None);
    }

    #[test]
    fn a_refusal_goes_into_the_history_and_the_latest_death_describes_the_entry() {
        let cause = std::sync::Arc::new(charon_model::DeathCause::new(None, Some("why".into()), None, None).unwrap());
        let mut refused = message();
        refused.broker.refusal = Some(std::sync::Arc::clone(&cause));
        let copy = dead_lettered_copy(&refused, "q", DeathReason::Rejected, "", Some("q"), 1);
        assert_eq!(copy.broker.refusal, None, "it does not travel further with the message");
        let entry = |m: &Message| m.broker.deaths.as_deref().unwrap().entries.first().unwrap().cause.clone();
        assert_eq!(entry(&copy), Some(cause));
        // Rejected again in the same queue without a word: the entry describes this death.
        let again = dead_lettered_copy(&copy, "q", DeathReason::Rejected, "", Some("q"), 2);
        assert_eq!(entry(&again), None);
        assert_eq!(again.broker.deaths.as_deref().unwrap().entries.first().unwrap().count, 2);
        // No refusal, no cause.
        assert_eq!(entry(&dead_lettered_copy(&message(), "q", DeathReason::Rejected, "", None, 1)), None);
    }

    #[test]
    fn a_dead_letter_routing_key_replaces_every_key() {
        let copy = dead_lettered_copy(&message(), "q", DeathReason::Expired, "dlx", Some("dl"), 1);
        assert_eq!(copy.routing.all_keys().collect::<Vec<_>>(), ["dl"]);
        // The history keeps the keys the message had before.
        assert_eq!(copy.broker.deaths.as_deref().unwrap().entries.first().unwrap().routing_keys, ["k", "c"]);
    }

    #[test]
    fn cycles_are_automatic_loops_back_to_the_target() {
        let m = dead_lettered_copy(&message(), "q1", DeathReason::Expired, "", None, 1);
        let h = m.broker.deaths.as_deref().unwrap();
        assert!(is_cycle(h, "q1"));
        assert!(!is_cycle(h, "q2"));
        // q1 -rejected-> q2 -expired-> q3 -expired-> back to q1: the rejection breaks the cycle.
        let m = dead_lettered_copy(&message(), "q1", DeathReason::Rejected, "", None, 1);
        let m = dead_lettered_copy(&m, "q2", DeathReason::Expired, "", None, 2);
        let m = dead_lettered_copy(&m, "q3", DeathReason::Expired, "", None, 3);
        let h = m.broker.deaths.as_deref().unwrap();
        assert!(!is_cycle(h, "q1"));
        assert!(is_cycle(h, "q2"));
    }
}
