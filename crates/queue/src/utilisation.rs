//! RabbitMQ's `consumer_utilisation` of a classic queue (`rabbit_queue_consumers`): the share of
//! time its consumers could take messages as fast as it had them, as a moving average with a
//! one-second half-life. The queue is *active* while it has nothing ready or a consumer can
//! take more, *inactive* while messages wait because every consumer is at its prefetch or
//! credit limit. A queue without consumers reports 0, as 4.0.5's API shows it.
//!
//! The state changes at most once per pass and only then is time read (the pass's clock, in
//! ms), so the message path pays nothing for it.

/// RabbitMQ's `?USE_AVG_HALF_LIFE`: one second.
const HALF_LIFE_MS: f64 = 1000.0;

/// Active or inactive since when, with the average before that.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Use {
    Active { since: i64, average: f64 },
    Inactive { since: i64, active_ms: i64, average: f64 },
}

/// A queue's consumer utilisation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Utilisation {
    state: Use,
}

impl Utilisation {
    /// A new queue: active from `now`, fully utilised (RabbitMQ starts at 1.0).
    pub(super) fn new(now: i64) -> Self {
        Self { state: Use::Active { since: now, average: 1.0 } }
    }

    /// After a pass at `now`: whether the consumers could take everything ready.
    pub(super) fn note(&mut self, active: bool, now: i64) {
        self.state = match (self.state, active) {
            (Use::Active { since, average }, false) => Use::Inactive { since: now, active_ms: now - since, average },
            (Use::Inactive { since, active_ms, average }, true) => {
                Use::Active { since: now, average: moving(active_ms, now - since, average) }
            }
            (state, _) => state,
        };
    }

    /// The utilisation at `now`, between 0 and 1.
    pub(super) fn at(&self, now: i64) -> f64 {
        match self.state {
            Use::Active { since, average } => moving(now - since, 0, average),
            Use::Inactive { since, active_ms, average } => moving(active_ms, now - since, average),
        }
    }
}

/// `use_avg/3`: folds a period of `active` then `inactive` ms into `average`, weighting the
/// old average by how long ago the period began (`rabbit_misc:moving_average/4`).
fn moving(active: i64, inactive: i64, average: f64) -> f64 {
    let (active, inactive) = (active.max(0), inactive.max(0));
    let time = active + inactive;
    if time == 0 {
        return average;
    }
    let weight = (time as f64 * 0.5f64.ln() / HALF_LIFE_MS).exp();
    (active as f64 / time as f64) * (1.0 - weight) + average * weight
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_whose_consumers_keep_up_stays_at_one() {
        let mut use_ = Utilisation::new(0);
        use_.note(true, 500);
        assert_eq!(use_.at(10_000), 1.0);
    }

    #[test]
    fn blocked_consumers_bring_it_down_by_half_each_second_and_back_up() {
        let mut use_ = Utilisation::new(0);
        use_.note(false, 0);
        assert!((use_.at(1000) - 0.5).abs() < 1e-9, "one half-life inactive: {}", use_.at(1000));
        assert!((use_.at(2000) - 0.25).abs() < 1e-9, "two: {}", use_.at(2000));
        use_.note(true, 2000);
        let back = use_.at(3000);
        assert!((back - 0.625).abs() < 1e-9, "a second active again: {back}");
    }

    #[test]
    fn repeated_notes_of_the_same_state_change_nothing() {
        let mut use_ = Utilisation::new(0);
        use_.note(false, 100);
        let once = use_;
        use_.note(false, 900);
        assert_eq!(use_, once);
    }
}
