//! Messages from clients: address, route, enqueue, and settle with RabbitMQ's outcomes
//! (accepted once every queue took the message, released when nothing routed it).

use std::sync::Arc;

use bytes::Bytes;
use charon_engine::metrics::{Counter, LocalCounters};
use charon_engine::publisher::{Answered, Outstanding, Publisher};
use charon_engine::{Action, Broker, Client, ExchangeKind, Flush, Principal, VHost, WriteGrants};
use charon_model::Value;
use charon_model::erlang::parsed_binary;
use fe2o3_amqp_types::definitions::Error;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Rejected, Released};
use fe2o3_amqp_types::primitives::{OrderedMap, Symbol};
use serde_amqp::Value as Amqp;

use super::address::{TargetAddress, parse_target};
use super::deletions::Deletions;
use super::frames::Arrival;
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

/// A transfer refused beyond its own outcome: what happens to its session or link.
#[derive(Debug)]
pub(crate) enum TransferError {
    /// The session ends with this error (a message that does not decode, a permission
    /// refused), as RabbitMQ's session does.
    EndSession(Error),
    /// The link detaches with this error (a reserved annotation, a settled message the
    /// anonymous terminus cannot address, an exchange deleted since attach).
    Detach(Error),
}

/// The exchange and routing key a transfer goes to: its link's fixed target, or for the
/// anonymous terminus the message's `to`, which must name an existing exchange that is not
/// internal (RabbitMQ's `lookup_target/6`).
fn address(vhost: &VHost, target: &TargetAddress, to: Option<&str>) -> Result<(String, String), Error> {
    match target {
        TargetAddress::Exchange { exchange, routing_key } => Ok((exchange.clone(), routing_key.clone())),
        TargetAddress::Queue(queue) => Ok((String::new(), queue.clone())),
        TargetAddress::Anonymous => {
            let Some(to) = to else {
                return Err(error(
                    "amqp:precondition-failed",
                    "anonymous terminus requires 'to' address to be set".to_owned(),
                ));
            };
            match parse_target(to) {
                None | Some(TargetAddress::Anonymous) => {
                    Err(error("amqp:precondition-failed", format!("bad 'to' address string: {to}")))
                }
                Some(TargetAddress::Queue(queue)) => Ok((String::new(), queue)),
                Some(TargetAddress::Exchange { exchange, routing_key }) => match vhost.exchange(&exchange) {
                    Some(info) if info.internal => Err(error(
                        "amqp:unauthorized-access",
                        format!("forbidden to publish to internal exchange '{exchange}' in vhost '{}'", vhost.name()),
                    )),
                    Some(_) => Ok((exchange, routing_key)),
                    None => {
                        Err(error("amqp:not-found", format!("no exchange '{exchange}' in vhost '{}'", vhost.name())))
                    }
                },
            }
        }
    }
}

/// What the connection does with the messages clients send: routes them (the publisher, its
/// route cache and per-queue batches), counts the queues each unsettled one waits for and
/// settles it when they answered, remembers the exchanges the user may write to, and watches
/// the queues published to by name.
pub(crate) struct Incoming {
    /// Routes, and transfers routed in this wake-up, not yet handed to their queues.
    publisher: Publisher,
    /// Unsettled transfers waiting for every queue they were routed to.
    unsettled: Outstanding<Unsettled>,
    /// Exchanges anonymous-terminus publishes may go to, while permissions are unchanged.
    write_grants: WriteGrants,
    /// Queues published to through a link that names them, watched for their deletion.
    deletions: Deletions,
}

impl Incoming {
    /// Nothing routed, nothing waiting; the publisher's batches go out through `client`'s
    /// sink.
    pub(crate) fn new(client: &Client) -> Self {
        Self {
            publisher: Publisher::new(Some(client.sink().clone())),
            unsettled: Outstanding::new(0),
            write_grants: WriteGrants::default(),
            deletions: Deletions::new(),
        }
    }

    /// Routes one transfer on a link whose target is `target` and queues it for its queues;
    /// an unroutable one is released (unsettled) or dropped (settled), as RabbitMQ does.
    pub(crate) fn publish(
        &mut self,
        (broker, client): (&Broker, &mut Client),
        arrival: Arrival<'_>,
        target: &TargetAddress,
        payload: &Bytes,
        conn: &mut Connection,
    ) -> Result<(), TransferError> {
        let Arrival { channel, delivery_id, delivery_tag, settled, .. } = arrival;
        let parsed = parse_message(payload).map_err(|e| {
            TransferError::EndSession(error("amqp:decode-error", format!("failed to decode message: {e}")))
        })?;
        // RabbitMQ 4.3 refuses a message-annotation key that is not a symbol starting with `x-`
        // (the spec reserves the others) and detaches the link (4.0.5 ended the session).
        if let Some(key) = parsed.annotations.iter().find_map(|(k, _)| reserved_annotation_key(k)) {
            let description = format!("failed to parse message: {{reserved_annotation_key,{key}}}");
            return Err(TransferError::Detach(error("amqp:decode-error", description)));
        }
        let (Some(user), Some(vhost)) = (client.user(), client.vhost()) else {
            return Ok(());
        };
        let to = parsed.properties.as_ref().and_then(|p| p.to.as_deref());
        let (exchange, routing_key) = match address(vhost, target, to) {
            Ok(found) => found,
            // Anonymous-terminus routing errors (OASIS anonterm): an unsettled message is
            // rejected with the error; a settled one detaches the link.
            Err(mut err) if settled => {
                let mut info = OrderedMap::new();
                info.insert(Symbol::from("delivery-tag"), Amqp::Binary(delivery_tag.to_vec().into()));
                err.info = Some(Box::new(info));
                return Err(TransferError::Detach(err));
            }
            Err(err) => {
                conn.settle_incoming(channel, delivery_id, DeliveryState::Rejected(Rejected { error: Some(err) }));
                return Ok(());
            }
        };
        // Write on the exchange, as it comes (RabbitMQ's `lookup_target/6` for the anonymous
        // terminus; a fixed target passed at attach and is remembered); a refusal ends the
        // session as there.
        let unauthorized =
            |e: charon_engine::EngineError| TransferError::EndSession(error("amqp:unauthorized-access", e.to_string()));
        let principal = Principal::new(broker.access(), user);
        let is_topic = || vhost.exchange(&exchange).is_some_and(|x| x.kind == ExchangeKind::Topic);
        let topic = self.write_grants.check(principal, vhost.name(), &exchange, is_topic).map_err(unauthorized)?;
        let message = to_model(&parsed, &exchange, routing_key);
        // Every routing key against topic permissions, then `user-id`; a message refused here
        // was received all the same.
        let refused = if topic {
            let mut keys = message.routing.all_keys();
            keys.find_map(|key| principal.check_topic(Action::Write, vhost.name(), &exchange, key).err())
                .map(unauthorized)
        } else {
            None
        };
        let refused = refused.or_else(|| {
            let claimed = message.properties().user_id.as_ref().filter(|c| c.as_ref() != user.name.as_bytes())?;
            let description = format!(
                "user_id property set to '{}' but authenticated user was '{}'",
                String::from_utf8_lossy(claimed),
                user.name
            );
            Some(TransferError::EndSession(error("amqp:unauthorized-access", description)))
        });
        let counters = client.counters();
        counters.add(Counter::Received, 1);
        if !settled {
            counters.add(Counter::ReceivedConfirm, 1);
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        let Some(vhost) = client.vhost() else {
            return Ok(());
        };
        let routed = self.publisher.route(vhost, &message);
        let counters = client.counters();
        let queues = match routed {
            Ok(queues) => queues,
            Err(e) => {
                // The link's exchange was deleted after attach.
                if !settled {
                    conn.settle_incoming(channel, delivery_id, DeliveryState::Released(Released {}));
                }
                return Err(TransferError::Detach(error("amqp:not-found", e.to_string())));
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
                counters.add(Counter::UnroutableDropped, 1);
            } else {
                counters.add(Counter::UnroutableReturned, 1);
                conn.settle_incoming(channel, delivery_id, DeliveryState::Released(Released {}));
            }
            return Ok(());
        }
        counters.add(Counter::Routed, 1);
        let confirm = (!settled).then(|| self.unsettled.expect(queues.len(), Unsettled { channel, delivery_id }));
        // One confirm channel for the whole connection: the numbers tell the transfers apart.
        self.publisher.push(&queues, 0, &Arc::new(message), confirm);
        Ok(())
    }

    /// Hands the routed publishes to their queues, in order. A queue that holds its publishers
    /// (flow) stops them at its batch ([`Flush::Hold`]): that one and the rest wait, the
    /// sending links get no new credit meanwhile (the driver withholds it while
    /// [`Self::held`]), so what arrives on the credit already granted is all that can join
    /// them. With `force` everything goes regardless: the session or connection is going away.
    /// A queue gone in between accepts its messages, as RabbitMQ does.
    pub(crate) async fn flush(&mut self, force: bool, counters: &mut LocalCounters, conn: &mut Connection) {
        let mode = if force { Flush::Force } else { Flush::Hold };
        for (_, numbers) in self.publisher.flush(mode).await {
            self.confirmed(&numbers, &[], counters, conn);
        }
    }

    /// Whether a queue holds this connection's publishes back (flow).
    pub(crate) fn held(&self) -> bool {
        self.publisher.held()
    }

    /// What the driver waits for beside its inbox: `None` once the queue that held the
    /// publishes admits them (the next flush hands them over), or the name of a queue
    /// published to by name that was deleted (see [`Deletions::next`]). Cancel-safe.
    pub(crate) async fn admitted_or_deleted(&mut self) -> Option<String> {
        tokio::select! {
            () = charon_engine::queue::until_admitted(self.publisher.holding()) => None,
            deleted = self.deletions.next() => Some(deleted),
        }
    }

    /// Session `channel` ended: the queues still answer for its publishes, but an ended
    /// session takes no disposition (one would reach a session the client began later on the
    /// same channel, naming delivery ids it never sent).
    pub(crate) fn session_ended(&mut self, channel: u16) {
        self.unsettled.retain(|pending| pending.channel != channel);
    }

    /// Queues answered for publishes: settle those every queue answered for, consecutive
    /// delivery ids with the same outcome in one disposition.
    pub(crate) fn confirmed(
        &mut self,
        accepted: &[u64],
        refused: &[u64],
        counters: &mut LocalCounters,
        conn: &mut Connection,
    ) {
        let answers = accepted.iter().map(|s| (*s, true)).chain(refused.iter().map(|s| (*s, false)));
        let mut run: Option<Settled> = None;
        for (seq, ok) in answers {
            let Some(Answered { value: done, refused_on }) = self.unsettled.answer(seq, 0, ok) else {
                continue;
            };
            let refused = refused_on.is_some();
            if !refused {
                counters.add(Counter::Confirmed, 1);
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
