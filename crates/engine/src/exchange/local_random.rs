//! RabbitMQ 4's `x-local-random` exchange: each message goes to one bound queue, picked at
//! random among those on the publisher's node (on one node: all of them). Bindings must have
//! an empty key and lead to a classic queue (`rabbit_exchange_type_local_random`); they are
//! kept as a fanout exchange keeps its own.

use super::binding::Destination;
use crate::error::EngineError;
use crate::queue::QueueType;

/// The type name as declared.
pub(crate) const NAME: &str = "x-local-random";

/// RabbitMQ's `validate_binding/2`: `queue_type` is the destination's type, `None` when the
/// destination is not a queue.
///
/// # Errors
/// RabbitMQ's 406 texts for a non-empty key, a destination that is not a queue and a queue
/// that is not classic.
pub(crate) fn validate_binding(key: &str, queue_type: Option<QueueType>) -> Result<(), EngineError> {
    if !key.is_empty() {
        return Err(EngineError::Precondition(format!("Non empty binding '{key}' key not permitted")));
    }
    match queue_type {
        Some(QueueType::Classic) => Ok(()),
        Some(QueueType::Quorum) => {
            Err(EngineError::Precondition("Queue type rabbit_quorum_queue not valid for this exchange type".into()))
        }
        None => Err(EngineError::Precondition("Destination not found".into())),
    }
}

/// The one destination a message takes among `destinations`, `pick` choosing an index below
/// the number it is given (a random number in the broker, a fixed one in tests).
pub(crate) fn choose<'a>(
    destinations: &[&'a Destination],
    pick: impl FnOnce(usize) -> usize,
) -> Option<&'a Destination> {
    match destinations {
        [] => None,
        [only] => Some(only),
        many => many.get(pick(many.len())).copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_key_to_a_classic_queue_binds() {
        assert!(validate_binding("", Some(QueueType::Classic)).is_ok());
        let text = |r: Result<(), EngineError>| r.err().map(|e| e.to_string());
        assert_eq!(
            text(validate_binding("k", Some(QueueType::Classic))),
            Some(EngineError::Precondition("Non empty binding 'k' key not permitted".into()).to_string())
        );
        assert!(validate_binding("", Some(QueueType::Quorum)).is_err());
        assert!(validate_binding("", None).is_err());
    }

    #[test]
    fn one_destination_is_chosen_by_the_pick() {
        let (a, b, c) =
            (Destination::Queue("a".into()), Destination::Queue("b".into()), Destination::Queue("c".into()));
        let all = [&a, &b, &c];
        assert_eq!(choose(&all, |n| n - 1), Some(&c));
        assert_eq!(choose(&all, |_| 0), Some(&a));
        assert_eq!(choose(&[&b], |_| unreachable!("one destination needs no pick")), Some(&b));
        assert_eq!(choose(&[], |_| 0), None);
    }
}
