//! Message properties shared by AMQP 0.9.1 (`basic` class properties) and AMQP 1.0 (the
//! `header` and `properties` sections).
//!
//! Each field documents its source in both protocols. Units are normalised where the two
//! protocols differ (timestamps in milliseconds, TTL in milliseconds) so the engine never has to
//! know which protocol published a message.

use bytes::Bytes;

/// A message or correlation id. AMQP 1.0 allows four types; AMQP 0.9.1 only strings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MessageId {
    /// 0.9.1 shortstr, 1.0 `string`.
    String(String),
    /// 1.0 `ulong`.
    Ulong(u64),
    /// 1.0 `uuid`.
    Uuid([u8; 16]),
    /// 1.0 `binary`.
    Binary(Bytes),
}

/// Protocol-neutral message properties.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Properties {
    /// 0.9.1 `content-type`, 1.0 `properties.content-type` (a symbol).
    pub content_type: Option<String>,
    /// 0.9.1 `content-encoding`, 1.0 `properties.content-encoding` (a symbol).
    pub content_encoding: Option<String>,
    /// 0.9.1 `delivery-mode` as received (1 transient, 2 persistent), kept verbatim so a 0.9.1
    /// consumer sees exactly what was published. `None` when absent.
    pub delivery_mode: Option<u8>,
    /// 1.0 `header.durable` when the message came over 1.0 (`None` when absent).
    pub durable: Option<bool>,
    /// 0.9.1 `priority`, 1.0 `header.priority`.
    pub priority: Option<u8>,
    /// 0.9.1 `correlation-id`, 1.0 `properties.correlation-id`.
    pub correlation_id: Option<MessageId>,
    /// 0.9.1 `reply-to`, 1.0 `properties.reply-to`.
    pub reply_to: Option<String>,
    /// Per-message time to live in milliseconds: 0.9.1 `expiration` (validated as an integer
    /// string at publish), 1.0 `header.ttl`.
    pub ttl: Option<u64>,
    /// 0.9.1 `message-id`, 1.0 `properties.message-id`.
    pub message_id: Option<MessageId>,
    /// Milliseconds since the Unix epoch: 0.9.1 `timestamp` (seconds × 1000), 1.0
    /// `properties.creation-time`.
    pub timestamp: Option<i64>,
    /// 0.9.1 `type`.
    pub message_type: Option<String>,
    /// 0.9.1 `user-id` (shortstr), 1.0 `properties.user-id` (binary). Validated against the
    /// authenticated user at publish, as RabbitMQ does.
    pub user_id: Option<Bytes>,
    /// 0.9.1 `app-id`.
    pub app_id: Option<String>,
    /// 0.9.1 `cluster-id` (deprecated, kept for exact round trips).
    pub cluster_id: Option<String>,
    /// 1.0 `properties.to`.
    pub to: Option<String>,
    /// 1.0 `properties.subject`.
    pub subject: Option<String>,
    /// 1.0 `properties.absolute-expiry-time` (ms since epoch).
    pub absolute_expiry_time: Option<i64>,
    /// 1.0 `properties.group-id`.
    pub group_id: Option<String>,
    /// 1.0 `properties.group-sequence`.
    pub group_sequence: Option<u32>,
    /// 1.0 `properties.reply-to-group-id`.
    pub reply_to_group_id: Option<String>,
}

impl Properties {
    /// Whether the message asks to be stored durably: 0.9.1 delivery-mode 2, or 1.0
    /// `header.durable` true. RabbitMQ 4 treats a 1.0 message without a `durable` field as
    /// durable (reference-observations.md); 0.9.1 without delivery-mode is transient.
    #[must_use]
    pub fn is_persistent(&self) -> bool {
        match (self.delivery_mode, self.durable) {
            (Some(mode), _) => mode == 2,
            (None, Some(durable)) => durable,
            (None, None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistence_follows_delivery_mode_then_durable() {
        let mut p = Properties::default();
        assert!(!p.is_persistent());
        p.delivery_mode = Some(2);
        assert!(p.is_persistent());
        p.delivery_mode = Some(1);
        p.durable = Some(true);
        assert!(!p.is_persistent());
        p.delivery_mode = None;
        assert!(p.is_persistent());
    }
}
