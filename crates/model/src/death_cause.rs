//! Why a consumer refused a message, as it said it with its AMQP 1.0 outcome.
//!
//! A Charon extension to RabbitMQ's death record: an AMQP 1.0 consumer can say why it gave a
//! message up — `rejected` with an `error` (condition, description, info), or
//! `modified{undeliverable-here}` with message annotations — and RabbitMQ 4.0.5 drops what it
//! said. Charon keeps it with the `{queue, reason}` entry of the death history, so whoever
//! reads the dead-letter queue learns why the message died (`docs/fidelity.md`). A consumer
//! that says nothing (every 0.9.1 reject and nack, a 1.0 `rejected` without error) leaves no
//! cause, and the entry is exactly RabbitMQ's.

use crate::value::Table;

/// What a refusing consumer said about the message. Never empty: [`DeathCause::new`] answers
/// `None` when there is nothing to keep.
#[derive(Clone, Debug, PartialEq)]
pub struct DeathCause {
    condition: Option<String>,
    description: Option<String>,
    info: Option<Table>,
    annotations: Option<Table>,
}

impl DeathCause {
    /// A cause from the parts a consumer sent: the error's condition symbol, description and
    /// info fields (`rejected`), and the message annotations of a `modified` outcome. Empty
    /// tables count as absent; `None` when nothing is left.
    #[must_use]
    pub fn new(
        condition: Option<String>,
        description: Option<String>,
        info: Option<Table>,
        annotations: Option<Table>,
    ) -> Option<Self> {
        let info = info.filter(|t| !t.is_empty());
        let annotations = annotations.filter(|t| !t.is_empty());
        let empty = condition.is_none() && description.is_none() && info.is_none() && annotations.is_none();
        (!empty).then_some(Self { condition, description, info, annotations })
    }

    /// The error condition symbol (`rejected`), e.g. `amqp:internal-error` or an application's
    /// own such as `app:bad-payload`.
    #[must_use]
    pub fn condition(&self) -> Option<&str> {
        self.condition.as_deref()
    }

    /// The error description (`rejected`).
    #[must_use]
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The error info fields (`rejected`), symbol keys as table keys.
    #[must_use]
    pub fn info(&self) -> Option<&Table> {
        self.info.as_ref()
    }

    /// The message annotations of `modified{undeliverable-here}`.
    #[must_use]
    pub fn annotations(&self) -> Option<&Table> {
        self.annotations.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    #[test]
    fn nothing_said_is_no_cause() {
        assert_eq!(DeathCause::new(None, None, None, None), None);
        assert_eq!(DeathCause::new(None, None, Some(Table::new()), Some(Table::new())), None);
    }

    #[test]
    fn the_parts_said_are_kept_and_empty_tables_dropped() {
        let mut info = Table::new();
        info.insert("field", Value::I32(3));
        let cause = DeathCause::new(Some("app:bad".into()), Some("why".into()), Some(info.clone()), Some(Table::new()))
            .unwrap();
        assert_eq!(
            (cause.condition(), cause.description(), cause.info(), cause.annotations()),
            (Some("app:bad"), Some("why"), Some(&info), None)
        );
        let only_annotations = DeathCause::new(None, None, None, Some(info.clone())).unwrap();
        assert_eq!((only_annotations.condition(), only_annotations.annotations()), (None, Some(&info)));
    }
}
