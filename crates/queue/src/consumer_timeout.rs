//! A queue's consumer (delivery acknowledgement) timeout, as RabbitMQ 4.0.5 resolves it from
//! the `x-consumer-timeout` argument and the `consumer-timeout` policy key
//! (`rabbit_channel:get_queue_consumer_timeout/2`). The engine only stores it: the protocol
//! adapters time their unsettled deliveries out, since the clock runs per channel there.

use std::sync::atomic::{AtomicI64, Ordering};

use charon_model::Value;

/// RabbitMQ's default `consumer_timeout`: 30 minutes.
pub const DEFAULT_CONSUMER_TIMEOUT_MS: u64 = 1_800_000;

/// What a queue says about how long a delivery from it may stay unacknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConsumerTimeout {
    /// Neither the argument nor a policy sets it: the broker's `consumer_timeout` applies.
    #[default]
    BrokerDefault,
    /// A value that is not an integer (a string, a boolean, a float...): RabbitMQ accepts it
    /// at declare and then never times a delivery from this queue out.
    Never,
    /// Milliseconds. Not validated at declare: zero and negative values time a delivery out
    /// at the first check after it went out.
    Millis(i64),
}

/// A value as Erlang orders it for `erlang:min/2`: every number sorts below every other term.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
enum Term {
    Integer(i64),
    Float(f64),
    Other,
}

impl Term {
    fn of(value: &Value) -> Self {
        match (value.as_i64(), value) {
            (Some(n), _) => Self::Integer(n),
            (None, Value::F32(f)) => Self::Float(f64::from(*f)),
            (None, Value::F64(f)) => Self::Float(*f),
            _ => Self::Other,
        }
    }

    fn number(self) -> Option<f64> {
        match self {
            // Precision past 2^53 ms (285,000 years) does not matter for a comparison.
            #[allow(clippy::cast_precision_loss)]
            Self::Integer(n) => Some(n as f64),
            Self::Float(f) => Some(f),
            Self::Other => None,
        }
    }

    /// `erlang:min/2`: the smaller number; a number over anything else; else the first.
    fn min(self, other: Self) -> Self {
        match (self.number(), other.number()) {
            (Some(a), Some(b)) if b < a => other,
            (None, Some(_)) => other,
            _ => self,
        }
    }
}

impl ConsumerTimeout {
    /// `args_policy_lookup(<<"consumer-timeout">>, fun erlang:min/2, Q)`: the argument, the
    /// policy's value, or the smaller of the two; only an integer result is a timeout.
    #[must_use]
    pub fn resolve(argument: Option<&Value>, policy: Option<&Value>) -> Self {
        let term = match (argument.map(Term::of), policy.map(Term::of)) {
            (None, None) => return Self::BrokerDefault,
            (Some(one), None) | (None, Some(one)) => one,
            (Some(arg), Some(pol)) => pol.min(arg),
        };
        match term {
            Term::Integer(ms) => Self::Millis(ms),
            Term::Float(_) | Term::Other => Self::Never,
        }
    }

    /// The timeout in ms, `broker_default` standing in for [`Self::BrokerDefault`]; `None`:
    /// deliveries from this queue are never timed out.
    #[must_use]
    pub fn millis(self, broker_default: Option<u64>) -> Option<i64> {
        match self {
            Self::BrokerDefault => broker_default.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
            Self::Never => None,
            Self::Millis(ms) => Some(ms),
        }
    }
}

/// Sentinels of [`TimeoutCell`]'s encoding (a real timeout of exactly these values is
/// indistinguishable from them and means the same in practice: ~292 million years, or
/// "already expired").
const BROKER_DEFAULT: i64 = i64::MIN;
const NEVER: i64 = i64::MAX;

/// A queue's current [`ConsumerTimeout`], readable without a lock by every connection that
/// holds deliveries from it; rewritten when a policy changes the queue's settings.
#[derive(Debug)]
pub struct TimeoutCell(AtomicI64);

impl Default for TimeoutCell {
    fn default() -> Self {
        Self(AtomicI64::new(BROKER_DEFAULT))
    }
}

impl TimeoutCell {
    /// The current value.
    #[must_use]
    pub fn get(&self) -> ConsumerTimeout {
        match self.0.load(Ordering::Relaxed) {
            BROKER_DEFAULT => ConsumerTimeout::BrokerDefault,
            NEVER => ConsumerTimeout::Never,
            ms => ConsumerTimeout::Millis(ms),
        }
    }

    pub(crate) fn set(&self, timeout: ConsumerTimeout) {
        let encoded = match timeout {
            ConsumerTimeout::BrokerDefault => BROKER_DEFAULT,
            ConsumerTimeout::Never => NEVER,
            ConsumerTimeout::Millis(ms) => ms.clamp(BROKER_DEFAULT + 1, NEVER - 1),
        };
        self.0.store(encoded, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(arg: Option<Value>, policy: Option<Value>) -> ConsumerTimeout {
        ConsumerTimeout::resolve(arg.as_ref(), policy.as_ref())
    }

    #[test]
    fn unset_is_the_broker_default_and_one_side_wins_alone() {
        assert_eq!(resolve(None, None), ConsumerTimeout::BrokerDefault);
        assert_eq!(resolve(Some(Value::I32(1000)), None), ConsumerTimeout::Millis(1000));
        assert_eq!(resolve(None, Some(Value::I64(2500))), ConsumerTimeout::Millis(2500));
        assert_eq!(resolve(Some(Value::I8(-1)), None), ConsumerTimeout::Millis(-1));
    }

    #[test]
    fn argument_and_policy_give_the_smaller() {
        assert_eq!(resolve(Some(Value::I32(1000)), Some(Value::I64(60_000))), ConsumerTimeout::Millis(1000));
        assert_eq!(resolve(Some(Value::I64(60_000)), Some(Value::I64(1000))), ConsumerTimeout::Millis(1000));
    }

    #[test]
    fn a_value_that_is_not_an_integer_never_times_out_unless_a_number_is_smaller() {
        assert_eq!(resolve(Some(Value::long_str("abc")), None), ConsumerTimeout::Never);
        assert_eq!(resolve(Some(Value::Bool(true)), None), ConsumerTimeout::Never);
        assert_eq!(resolve(Some(Value::F64(1.5)), None), ConsumerTimeout::Never);
        // Erlang orders numbers below strings: the policy's number wins.
        assert_eq!(resolve(Some(Value::long_str("abc")), Some(Value::I64(5000))), ConsumerTimeout::Millis(5000));
        // A smaller float wins over an integer, and is no timeout.
        assert_eq!(resolve(Some(Value::F64(10.0)), Some(Value::I64(5000))), ConsumerTimeout::Never);
    }

    #[test]
    fn millis_fills_in_the_broker_default() {
        assert_eq!(ConsumerTimeout::BrokerDefault.millis(Some(1_800_000)), Some(1_800_000));
        assert_eq!(ConsumerTimeout::BrokerDefault.millis(None), None);
        assert_eq!(ConsumerTimeout::Never.millis(Some(1_800_000)), None);
        assert_eq!(ConsumerTimeout::Millis(5).millis(None), Some(5));
    }

    #[test]
    fn the_cell_round_trips_every_kind() {
        let cell = TimeoutCell::default();
        assert_eq!(cell.get(), ConsumerTimeout::BrokerDefault);
        for timeout in [ConsumerTimeout::Never, ConsumerTimeout::Millis(-3), ConsumerTimeout::Millis(1000)] {
            cell.set(timeout);
            assert_eq!(cell.get(), timeout);
        }
        cell.set(ConsumerTimeout::Millis(i64::MIN));
        assert_eq!(cell.get(), ConsumerTimeout::Millis(i64::MIN + 1));
        cell.set(ConsumerTimeout::BrokerDefault);
        assert_eq!(cell.get(), ConsumerTimeout::BrokerDefault);
    }
}
