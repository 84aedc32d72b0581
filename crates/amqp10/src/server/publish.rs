//! Messages from clients: address, route, enqueue, and settle with RabbitMQ's outcomes
//! (accepted once every queue took the message, released when nothing routed it).

use std::sync::Arc;

use bytes::Bytes;
use charon_engine::metrics::Counter;
use charon_engine::publisher::Answered;
use charon_engine::{Action, ExchangeKind, Flush, Principal};
use charon_model::Value;
use charon_model::erlang::parsed_binary;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Rejected, Released};
use fe2o3_amqp_types::primitives::{OrderedMap, Symbol};
use serde_amqp::Value as Amqp;

use super::address::{TargetAddress, parse_target};
use super::frames::Arrival;
use super::session::{LinkState, Session};
use crate::codec::parse_message;
use crate::mapping::to_model;
use crate::proto::{Connection, error};

/// An unsettled transfer waiting for its queues: the session channel it came on, and its
/// delivery id there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unsettled {
    pub(crate) channel: u16,
    delivery_id: u32,
}

/// Consecutive publishes settled with the same outcome: one disposition.
#[derive(Debug)]
struct Settled {
    channel: u16,
    first: u32,
    last: u32,
    refused: bool,
}

impl Settled {
    fn new(done: Unsettled, refused: bool) -> Self {
        Self { channel: done.channel, first: done.delivery_id, last: done.delivery_id, refused }
    }

    /// Whether `done` is the next delivery id on the same channel with the same outcome.
    fn extends(&self, done: Unsettled, refused: bool) -> bool {
        done.channel == self.channel && refused == self.refused && done.delivery_id == self.last.wrapping_add(1)
    }

    fn send(self, conn: &mut Connection) {
        // RabbitMQ 4.0.5 rejects a message a queue refused (reject-publish) with no error
        // condition (later releases add amqp:resource-limit-exceeded).
        let state = if self.refused {
            DeliveryState::Rejected(Rejected { error: None })
        } else {
            DeliveryState::Accepted(Accepted {})
        };
        conn.settle_incoming_range(self.channel, self.first, self.last, state);
    }
}

/// A message-annotation key RabbitMQ refuses, as its parser's term (`{symbol,<<"k">>}`,
/// `{utf8,<<"x-k">>}`, `{ulong,7}`), or `None` for an `x-` symbol.
fn reserved_annotation_key(key: &Value) -> Option<String> {
    let number = |tag: &str, n: String| Some(format!("{{{tag},{n}}}"));
    match key {
        Value::Symbol(s) if s.starts_with("x-") => None,
        Value::Symbol(s) => Some(format!("{{symbol,{}}}", parsed_binary(s.as_bytes()))),
        Value::String(s) => Some(format!("{{utf8,{}}}", parsed_binary(s.as_bytes()))),
        Value::Binary(b) => Some(format!("{{binary,{}}}", parsed_binary(b))),
        Value::U64(n) => number("ulong", n.to_string()),
        Value::I64(n) => number("long", n.to_string()),
        Value::U32(n) => number("uint", n.to_string()),
        Value::I32(n) => number("int", n.to_string()),
        Value::U16(n) => number("ushort", n.to_string()),
        Value::I16(n) => number("short", n.to_string()),
        Value::U8(n) => number("ubyte", n.to_string()),
        Value::I8(n) => number("byte", n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".to_owned()),
        other => Some(format!("{other:?}")),
    }
}

/// Why an anonymous-terminus message could not be addressed.
struct AddressError {
    condition: &'static str,
    description: String,
}

impl Session {
    pub(crate) async fn on_transfer(&mut self, arrival: Arrival<'_>, payload: Bytes, conn: &mut Connection) {
        match self.links.get(&(arrival.channel, arrival.handle)) {
            Some(LinkState::Publisher { target }) => {
                let target = Arc::clone(target);
                self.publish(arrival, &target, payload, conn).await;
            }
            Some(LinkState::ManagementRequests { pair }) => {
                let pair = pair.clone();
                self.flush(conn, false).await;
                let client = (&*self.broker, &self.client);
                if let Err(end) = self.management.request(client, &pair, &payload, conn).await {
                    self.fail_session(end.channel, end.condition, end.description, conn).await;
                }
            }
            _ => {}
        }
    }

    fn address(&self, target: &TargetAddress, to: Option<&str>) -> Result<(String, String), AddressError> {
        match target {
            TargetAddress::Exchange { exchange, routing_key } => Ok((exchange.clone(), routing_key.clone())),
            TargetAddress::Queue(queue) => Ok((String::new(), queue.clone())),
            TargetAddress::Anonymous => {
                let Some(to) = to else {
                    return Err(AddressError {
                        condition: "amqp:precondition-failed",
                        description: "anonymous terminus requires 'to' address to be set".to_owned(),
                    });
                };
                match parse_target(to) {
                    None | Some(TargetAddress::Anonymous) => Err(AddressError {
                        condition: "amqp:precondition-failed",
                        description: format!("bad 'to' address string: {to}"),
                    }),
                    Some(TargetAddress::Queue(queue)) => Ok((String::new(), queue)),
                    Some(TargetAddress::Exchange { exchange, routing_key }) => {
                        let vhost = self.client.vhost();
                        match vhost.and_then(|v| v.exchange(&exchange)) {
                            Some(info) if info.internal => Err(AddressError {
                                condition: "amqp:unauthorized-access",
                                description: format!(
                                    "forbidden to publish to internal exchange '{exchange}' in vhost '{}'",
                                    vhost.map(|v| v.name()).unwrap_or_default()
                                ),
                            }),
                            Some(_) => Ok((exchange, routing_key)),
                            None => Err(AddressError {
                                condition: "amqp:not-found",
                                description: format!(
                                    "no exchange '{exchange}' in vhost '{}'",
                                    vhost.map(|v| v.name()).unwrap_or_default()
                                ),
                            }),
                        }
                    }
                }
            }
        }
    }

    async fn publish(&mut self, arrival: Arrival<'_>, target: &TargetAddress, payload: Bytes, conn: &mut Connection) {
        let Arrival { channel, handle, delivery_id, delivery_tag, settled } = arrival;
        let parsed = match parse_message(&payload) {
            Ok(parsed) => parsed,
            Err(e) => {
                let description = format!("failed to decode message: {e}");
                self.fail_session(channel, "amqp:decode-error", description, conn).await;
                return;
            }
        };
        // RabbitMQ 4.3 refuses a message-annotation key that is not a symbol starting with `x-`
        // (the spec reserves the others) and detaches the link (4.0.5 ended the session).
        if let Some(key) = parsed.annotations.iter().find_map(|(k, _)| reserved_annotation_key(k)) {
            let description = format!("failed to parse message: {{reserved_annotation_key,{key}}}");
            self.publisher_gone(channel, handle);
            conn.detach(channel, handle, Some(error("amqp:decode-error", description)));
            return;
        }
        let to = parsed.properties.as_ref().and_then(|p| p.to.as_deref());
        let (exchange, routing_key) = match self.address(target, to) {
            Ok(found) => found,
            Err(AddressError { condition, description }) => {
                // Anonymous-terminus routing errors (OASIS anonterm): an unsettled message is
                // rejected with the error; a settled one detaches the link.
                let mut err = error(condition, description);
                if settled {
                    let mut info = OrderedMap::new();
                    info.insert(Symbol::from("delivery-tag"), Amqp::Binary(delivery_tag.to_vec().into()));
                    err.info = Some(Box::new(info));
                    self.publisher_gone(channel, handle);
                    conn.detach(channel, handle, Some(err));
                } else {
                    conn.settle_incoming(channel, delivery_id, DeliveryState::Rejected(Rejected { error: Some(err) }));
                }
                return;
            }
        };
        // Write on the exchange, as it comes (RabbitMQ's `lookup_target/6` for the anonymous
        // terminus; a fixed target passed at attach and is remembered); a refusal ends the
        // session as there.
        let topic = match (self.client.user(), self.client.vhost()) {
            (Some(user), Some(vhost)) => {
                let is_topic = || vhost.exchange(&exchange).is_some_and(|x| x.kind == ExchangeKind::Topic);
                let principal = Principal::new(self.broker.access(), user);
                self.write_grants.check(principal, vhost.name(), &exchange, is_topic)
            }
            _ => Ok(false),
        };
        let topic = match topic {
            Ok(topic) => topic,
            Err(e) => {
                self.fail_session(channel, "amqp:unauthorized-access", e.to_string(), conn).await;
                return;
            }
        };
        let message = to_model(&parsed, &exchange, routing_key);
        self.client.counters().add(Counter::Received, 1);
        if !settled {
            self.client.counters().add(Counter::ReceivedConfirm, 1);
        }
        if topic && let (Some(user), Some(vhost)) = (self.client.user(), self.client.vhost()) {
            let principal = Principal::new(self.broker.access(), user);
            let refused = message
                .routing
                .all_keys()
                .find_map(|key| principal.check_topic(Action::Write, vhost.name(), &exchange, key).err());
            if let Some(e) = refused {
                self.fail_session(channel, "amqp:unauthorized-access", e.to_string(), conn).await;
                return;
            }
        }
        if let (Some(claimed), Some(user)) = (&message.properties().user_id, self.client.user())
            && claimed.as_ref() != user.name.as_bytes()
        {
            let description = format!(
                "user_id property set to '{}' but authenticated user was '{}'",
                String::from_utf8_lossy(claimed),
                user.name
            );
            self.fail_session(channel, "amqp:unauthorized-access", description, conn).await;
            return;
        }
        let Some(vhost) = self.client.vhost() else {
            return;
        };
        let queues = match self.publisher.route(vhost, &message) {
            Ok(queues) => queues,
            Err(e) => {
                // The link's exchange was deleted after attach.
                if !settled {
                    conn.settle_incoming(channel, delivery_id, DeliveryState::Released(Released {}));
                }
                self.publisher_gone(channel, handle);
                conn.detach(channel, handle, Some(error("amqp:not-found", e.to_string())));
                return;
            }
        };
        if let TargetAddress::Queue(_) = target {
            for queue in queues.iter() {
                self.deletions.watch(queue);
            }
        }
        if queues.is_empty() {
            // RabbitMQ releases an unsettled unroutable message (returned to its sender) and
            // drops a settled one.
            if settled {
                self.client.counters().add(Counter::UnroutableDropped, 1);
            } else {
                self.client.counters().add(Counter::UnroutableReturned, 1);
                conn.settle_incoming(channel, delivery_id, DeliveryState::Released(Released {}));
            }
            return;
        }
        self.client.counters().add(Counter::Routed, 1);
        let confirm = (!settled).then(|| self.publishes.expect(queues.len(), Unsettled { channel, delivery_id }));
        // One confirm channel for the whole connection: the numbers tell the transfers apart.
        self.publisher.push(&queues, 0, &Arc::new(message), confirm);
    }

    /// A sending link went away.
    fn publisher_gone(&mut self, channel: u16, handle: u32) {
        if let Some(LinkState::Publisher { .. }) = self.links.remove(&(channel, handle)) {
            self.client.publisher_gone();
        }
    }

    /// Hands the routed publishes to their queues, in order. A queue that holds its publishers
    /// (flow) stops them at its batch ([`Flush::Hold`]): that one and the rest wait, the
    /// sending links get no new credit meanwhile (the driver withholds it while
    /// [`Self::held`]), so what arrives on the credit already granted is all that can join
    /// them. With `force` everything goes regardless: the session or connection is going away.
    /// A queue gone in between accepts its messages, as RabbitMQ does.
    pub(crate) async fn flush_publishes(&mut self, conn: &mut Connection, force: bool) {
        let mode = if force { Flush::Force } else { Flush::Hold };
        for (_, numbers) in self.publisher.flush(mode).await {
            self.confirmed(&numbers, &[], conn);
        }
    }

    /// Whether a queue holds this connection's publishes back (flow).
    pub(crate) fn held(&self) -> bool {
        self.publisher.held()
    }

    /// Queues answered for publishes: settle those every queue answered for, consecutive
    /// delivery ids with the same outcome in one disposition.
    pub(crate) fn confirmed(&mut self, accepted: &[u64], refused: &[u64], conn: &mut Connection) {
        let answers = accepted.iter().map(|s| (*s, true)).chain(refused.iter().map(|s| (*s, false)));
        let mut run: Option<Settled> = None;
        for (seq, ok) in answers {
            let Some(Answered { value: done, refused_on }) = self.publishes.answer(seq, 0, ok) else {
                continue;
            };
            let refused = refused_on.is_some();
            if !refused {
                self.client.counters().add(Counter::Confirmed, 1);
            }
            match run.as_mut() {
                Some(current) if current.extends(done, refused) => current.last = done.delivery_id,
                _ => {
                    if let Some(finished) = run.replace(Settled::new(done, refused)) {
                        finished.send(conn);
                    }
                }
            }
        }
        if let Some(finished) = run {
            finished.send(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(channel: u16, delivery_id: u32) -> Unsettled {
        Unsettled { channel, delivery_id }
    }

    #[test]
    fn a_run_grows_only_by_the_next_id_on_its_channel_with_its_outcome() {
        let run = Settled::new(done(1, u32::MAX), false);
        assert!(run.extends(done(1, 0), false));
        assert!(!run.extends(done(1, 1), false));
        assert!(!run.extends(done(2, 0), false));
        assert!(!run.extends(done(1, 0), true));
        assert_eq!((run.channel, run.first, run.last, run.refused), (1, u32::MAX, u32::MAX, false));
    }
}
