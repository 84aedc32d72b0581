//! What a redrive job is asked to do, as the HTTP API's JSON spells it (issue 20): the source
//! queue, where messages go, which ones, how fast and how many.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::RedriveError;

/// Where a redrive job sends messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// Back to where each message died from, as its death history says.
    Original {
        /// Which death: the first (`x-first-death-*`) or the last.
        death: DeathChoice,
    },
    /// To an exchange with one routing key.
    Exchange {
        /// The exchange (`""`: the default exchange).
        exchange: String,
        /// The routing key.
        routing_key: String,
    },
    /// To a queue, through the default exchange.
    Queue {
        /// The queue.
        queue: String,
    },
}

impl Target {
    /// The `destination` label of `charon_redrive_messages_total`: `original`, the exchange's
    /// or the queue's name.
    #[must_use]
    pub fn label(&self) -> &str {
        match self {
            Self::Original { .. } => "original",
            Self::Exchange { exchange, .. } => exchange,
            Self::Queue { queue } => queue,
        }
    }
}

/// Which death record of a message an `original` destination follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeathChoice {
    /// The first death ever (`x-first-death-queue` / `-exchange`).
    #[default]
    First,
    /// The most recent death (`x-last-death-*`).
    Last,
}

/// Which messages a job (or the browser) selects. Every given criterion must hold; an empty
/// list or map is no criterion. Reasons, source queues and the time window are those of the
/// message's *last* death: the one that brought it into the dead-letter queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Filter {
    /// Death reasons (`rejected`, `expired`, `maxlen`, `delivery_limit`).
    pub reasons: Vec<String>,
    /// The queues the messages died in.
    pub source_queues: Vec<String>,
    /// Died at or after this time (seconds since the epoch, like `x-death`'s `time`).
    pub died_after: Option<i64>,
    /// Died before this time (seconds since the epoch).
    pub died_before: Option<i64>,
    /// Header (0.9.1) or application property / message annotation (1.0) values, matched
    /// exactly: strings, integers or booleans.
    pub headers: BTreeMap<String, serde_json::Value>,
    /// Message ids (the `message-id` property as text).
    pub message_ids: Vec<String>,
}

/// A job as it is created.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The queue messages are taken from.
    pub source: String,
    /// Where they go.
    pub destination: Target,
    /// Which of them.
    #[serde(default)]
    pub filter: Filter,
    /// Only count what would move.
    #[serde(default)]
    pub dry_run: bool,
    /// Messages per second; `None`: as fast as the destination confirms.
    #[serde(default)]
    pub rate: Option<u32>,
    /// Stop after moving this many; `None`: no limit.
    #[serde(default)]
    pub max_messages: Option<u64>,
}

/// The reasons a filter may name.
pub const REASONS: [&str; 4] = ["rejected", "expired", "maxlen", "delivery_limit"];

impl JobSpec {
    /// Checks what serde cannot: names, reasons, header values, a positive rate.
    ///
    /// # Errors
    /// [`RedriveError::Invalid`] with what is wrong.
    pub fn validate(&self) -> Result<(), RedriveError> {
        if self.source.is_empty() {
            return Err(RedriveError::Invalid("source must name a queue".into()));
        }
        if let Target::Queue { queue } = &self.destination
            && queue.is_empty()
        {
            return Err(RedriveError::Invalid("destination queue must not be empty".into()));
        }
        if self.rate == Some(0) {
            return Err(RedriveError::Invalid("rate must be positive (omit it for no limit)".into()));
        }
        if self.max_messages == Some(0) {
            return Err(RedriveError::Invalid("max_messages must be positive (omit it for no limit)".into()));
        }
        self.filter.validate()
    }
}

impl Filter {
    /// Checks reasons and header values.
    ///
    /// # Errors
    /// [`RedriveError::Invalid`] with what is wrong.
    pub fn validate(&self) -> Result<(), RedriveError> {
        if let Some(bad) = self.reasons.iter().find(|r| !REASONS.contains(&r.as_str())) {
            return Err(RedriveError::Invalid(format!(
                "unknown reason '{bad}' (expected one of rejected, expired, maxlen, delivery_limit)"
            )));
        }
        if let Some((key, _)) = self.headers.iter().find(|(_, v)| !(v.is_string() || v.is_i64() || v.is_boolean())) {
            return Err(RedriveError::Invalid(format!(
                "header '{key}' must be matched by a string, integer or boolean"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_json_parses_and_unknown_fields_are_refused() {
        let spec: JobSpec = serde_json::from_str(
            r#"{"source":"dlq","destination":{"type":"original","death":"last"},
                "filter":{"reasons":["rejected"],"source_queues":["orders"],"died_after":1700000000,
                          "died_before":1700003600,"headers":{"k":"v"},"message_ids":["id1"]},
                "dry_run":false,"rate":100,"max_messages":1000}"#,
        )
        .unwrap();
        assert_eq!(spec.destination, Target::Original { death: DeathChoice::Last });
        assert_eq!(spec.filter.reasons, ["rejected"]);
        assert_eq!((spec.rate, spec.max_messages), (Some(100), Some(1000)));
        spec.validate().unwrap();
        let minimal: JobSpec =
            serde_json::from_str(r#"{"source":"dlq","destination":{"type":"queue","queue":"q"}}"#).unwrap();
        assert_eq!(minimal.filter, Filter::default());
        assert!(
            serde_json::from_str::<JobSpec>(r#"{"source":"d","destination":{"type":"queue","queue":"q"},"x":1}"#)
                .is_err()
        );
        assert!(
            serde_json::from_str::<JobSpec>(r#"{"source":"d","destination":{"type":"queue","queue":"q","x":1}}"#)
                .is_err()
        );
        let bad_reason = JobSpec { filter: Filter { reasons: vec!["nope".into()], ..Filter::default() }, ..minimal };
        assert!(matches!(bad_reason.validate(), Err(RedriveError::Invalid(text)) if text.contains("'nope'")));
    }
}
