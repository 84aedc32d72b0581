//! Where a redrive sends one message: the exchange and routing keys a [`Target`] gives it.

use charon_model::{Message, Routing};

use super::spec::{DeathChoice, Target};

/// Why a message cannot be addressed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// An `original` destination for a message that never died.
    #[error("the message has no death record to take its original queue from")]
    NoDeath,
}

impl Target {
    /// The routing the message is published with. `original` re-publishes to the exchange the
    /// chosen death records, with its routing keys (publish key, then CC), as RabbitMQ users
    /// expect; a death from the default exchange goes to the queue it died in. (The keys of the
    /// last death are those its `{queue, reason}` entry recorded at the first such death.)
    ///
    /// # Errors
    /// [`AddressError::NoDeath`] for `original` and a message without a death history.
    pub fn address(&self, message: &Message) -> Result<Routing, AddressError> {
        match self {
            Self::Exchange { exchange, routing_key } => {
                Ok(Routing { exchange: exchange.clone(), routing_key: routing_key.clone(), ..Routing::default() })
            }
            Self::Queue { queue } => Ok(Routing { routing_key: queue.clone(), ..Routing::default() }),
            Self::Original { death } => {
                let history = message.broker.deaths.as_deref().ok_or(AddressError::NoDeath)?;
                let event = match death {
                    DeathChoice::First => &history.first,
                    DeathChoice::Last => &history.last,
                };
                if event.exchange.is_empty() {
                    return Ok(Routing { routing_key: event.queue.clone(), ..Routing::default() });
                }
                let keys = history
                    .entries
                    .iter()
                    .find(|d| d.queue == event.queue && d.reason == event.reason)
                    .map(|d| d.routing_keys.as_slice())
                    .unwrap_or_default();
                let (key, cc) =
                    keys.split_first().map_or((String::new(), Vec::new()), |(k, cc)| (k.clone(), cc.to_vec()));
                Ok(Routing { exchange: event.exchange.clone(), routing_key: key, cc, bcc: Vec::new() })
            }
        }
    }
}

/// The copy of `message` a redrive publishes: addressed by `routing`, its redrive count one
/// higher, its death history kept; the source queue's own delivery counts (a quorum queue's
/// `x-delivery-count`) and any refusal stay behind.
#[must_use]
pub fn redriven(message: &Message, routing: Routing) -> Message {
    let mut copy = message.clone();
    copy.routing = routing;
    copy.broker.redrive_count = copy.broker.redrive_count.saturating_add(1);
    copy.broker.acquired_count = 0;
    copy.broker.refusal = None;
    copy
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, DeathHistory, DeathReason, DeathRecord};

    use super::*;

    fn died(queue: &str, reason: DeathReason, exchange: &str, keys: &[&str], m: &mut Message) {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let record = DeathRecord { queue, reason, exchange, routing_keys: &keys, ttl: None, now: 1, cause: None };
        match m.broker.deaths.as_deref_mut() {
            Some(history) => history.record(&record),
            None => m.broker.deaths = Some(Box::new(DeathHistory::new(&record))),
        }
    }

    #[test]
    fn original_follows_the_chosen_death_and_the_default_exchange_goes_to_the_queue() {
        let mut m = Message::new(Routing::default(), Body::Data("b".into()));
        died("orders", DeathReason::Rejected, "shop", &["order.new", "audit"], &mut m);
        died("retry", DeathReason::Expired, "", &["retry"], &mut m);
        let first = Target::Original { death: DeathChoice::First }.address(&m).unwrap();
        assert_eq!(
            first,
            Routing {
                exchange: "shop".into(),
                routing_key: "order.new".into(),
                cc: vec!["audit".into()],
                bcc: Vec::new()
            }
        );
        let last = Target::Original { death: DeathChoice::Last }.address(&m).unwrap();
        assert_eq!(last, Routing { routing_key: "retry".into(), ..Routing::default() });
        assert_eq!(
            Target::Original { death: DeathChoice::First }.address(&Message::default()),
            Err(AddressError::NoDeath)
        );
        let to_queue = Target::Queue { queue: "q".into() }.address(&m).unwrap();
        assert_eq!((to_queue.exchange.as_str(), to_queue.routing_key.as_str()), ("", "q"));
    }

    #[test]
    fn a_redriven_copy_counts_up_and_keeps_its_history() {
        let mut m = Message::default();
        died("orders", DeathReason::Rejected, "shop", &["k"], &mut m);
        m.broker.acquired_count = 2;
        let once = redriven(&m, Routing { routing_key: "a".into(), ..Routing::default() });
        let twice = redriven(&once, Routing::default());
        assert_eq!((once.broker.redrive_count, twice.broker.redrive_count), (1, 2));
        assert_eq!(twice.broker.acquired_count, 0);
        assert_eq!(twice.broker.deaths, m.broker.deaths);
        assert_eq!(once.routing.routing_key, "a");
    }
}
