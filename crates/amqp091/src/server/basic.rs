//! `basic.*` methods other than publish: consume, cancel, get, ack/nack/reject, qos, recover.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use amq_protocol::protocol::{AMQPClass, basic};
use charon_engine::metrics::TypedCounter;
use charon_engine::reply_to::PSEUDO_QUEUE;
use charon_engine::{Action, Broker, Client, ConsumeSpec, ConsumerId, Owner, Settle};
use rand::Rng;

use super::ack_timeout::AckTimer;
use super::channel::{ChannelConsumer, ChannelState, PendingAck, by_queue};
use super::grants::Grants;
use super::reply_to;
use super::session::ConsumerRoute;
use super::topology::arguments;
use super::{MethodError, MethodResult};
use crate::proto::{Connection, ReplyCode};

/// A broker-chosen consumer tag: `amq.ctag-` and 22 URL-safe base64 characters, as RabbitMQ's
/// `rabbit_guid:binary/2` makes them.
pub(crate) fn generated_tag() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut rng = rand::rng();
    let suffix: String = (0..22)
        .map(|_| char::from(ALPHABET.get(rng.random_range(0..ALPHABET.len())).copied().unwrap_or(b'A')))
        .collect();
    format!("amq.ctag-{suffix}")
}

/// The `basic.*` methods of one channel other than publish, over what they touch: the
/// channel, the connection's client (grants, counters, sink) and consumer routes, and its
/// consumer-timeout timer.
pub(crate) struct Basic<'a> {
    pub(crate) channel: u16,
    pub(crate) state: &'a mut ChannelState,
    pub(crate) broker: &'a Broker,
    pub(crate) client: &'a mut Client,
    pub(crate) consumers: &'a mut HashMap<ConsumerId, ConsumerRoute>,
    pub(crate) ack_timer: &'a mut AckTimer,
}

/// RabbitMQ's answer to an ack, nack or reject of a tag the channel does not hold.
fn unknown_tag(tag: u64) -> MethodError {
    MethodError::new(ReplyCode::PreconditionFailed, format!("unknown delivery tag {tag}"))
}

impl Basic<'_> {
    /// Acts on one `basic.*` method. `basic.cancel` is the session's (it must drain the
    /// consumer's deliveries from the inbox before cancel-ok: [`Self::cancel`] does the rest).
    pub(crate) async fn method(mut self, method: basic::AMQPMethod, conn: &mut Connection) -> MethodResult {
        let channel = self.channel;
        match method {
            basic::AMQPMethod::Qos(qos) => {
                self.state.qos(qos.prefetch_count, qos.global);
                conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})));
                Ok(())
            }
            basic::AMQPMethod::Consume(c) if c.queue.as_str() == PSEUDO_QUEUE => {
                let grants = Grants { broker: self.broker, client: self.client };
                reply_to::consume(grants, channel, self.state, &c, conn)
            }
            basic::AMQPMethod::Consume(c) => self.consume(c, conn).await,
            basic::AMQPMethod::Get(g) => self.get(g, conn).await,
            basic::AMQPMethod::Ack(a) => self.settle(a.delivery_tag, a.multiple, Settle::Ack).await,
            basic::AMQPMethod::Nack(n) => {
                let how = if n.requeue { Settle::Requeue } else { Settle::Discard };
                self.settle(n.delivery_tag, n.multiple, how).await
            }
            basic::AMQPMethod::Reject(r) => {
                let how = if r.requeue { Settle::Requeue } else { Settle::Discard };
                self.settle(r.delivery_tag, false, how).await
            }
            basic::AMQPMethod::Recover(r) => {
                self.recover(r.requeue).await?;
                conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})));
                Ok(())
            }
            basic::AMQPMethod::RecoverAsync(r) => self.recover(r.requeue).await,
            _ => Err(MethodError::new(ReplyCode::CommandInvalid, "unimplemented method")),
        }
    }

    fn grants(&self) -> Grants<'_> {
        Grants { broker: self.broker, client: self.client }
    }

    fn owner(&self) -> Owner {
        Owner { session: self.client.id(), channel: u32::from(self.channel) }
    }

    /// The channel's oldest unacked delivery may have changed: the timer must be due by its
    /// deadline.
    pub(crate) fn watch_oldest(&mut self) {
        if let Some(oldest) = self.state.unacked.oldest() {
            self.ack_timer.watch(oldest);
        }
    }

    async fn consume(&mut self, c: basic::Consume, conn: &mut Connection) -> MethodResult {
        let requested = c.consumer_tag.as_str();
        if !requested.is_empty() && self.state.consumers.contains_key(requested) {
            return Err(MethodError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{requested}'"),
            ));
        }
        let name = self.state.queue_name(c.queue.as_str())?;
        let grants = self.grants();
        grants.authorize(Action::Read, &grants.queue_resource(&name))?;
        let queue = grants.vhost()?.queue(&name, self.client.id())?;
        let tag = if requested.is_empty() { generated_tag() } else { requested.to_owned() };
        let id = self.broker.next_id();
        let spec = ConsumeSpec {
            id,
            tag: tag.clone(),
            owner: self.owner(),
            session: self.client.sink().clone(),
            no_ack: c.no_ack,
            prefetch: self.state.consumer_prefetch,
            link_credit: None,
            channel_limit: Some(Arc::clone(&self.state.global_limit)),
            exclusive: c.exclusive,
            arguments: arguments(&c.arguments),
        };
        queue.consume(spec).await?;
        self.state.touch(&queue);
        self.state.consumers.insert(tag.clone(), ChannelConsumer { id, queue: Arc::clone(&queue) });
        let route = ConsumerRoute { channel: self.channel, tag: Arc::from(tag.as_str()), no_ack: c.no_ack, queue };
        self.consumers.insert(id, route);
        if !c.nowait {
            let ok = basic::ConsumeOk { consumer_tag: tag.into() };
            conn.send_method(self.channel, &AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(ok)));
        }
        Ok(())
    }

    /// Stops the consumer `tag` names: the reply consumer at once, a queue consumer once its
    /// queue answered, which sends every delivery it made to it before (they are all in the
    /// inbox when this returns). The queue consumer's id, for the session to forget once it
    /// handled them.
    pub(crate) async fn cancel(self, tag: &str) -> Option<ConsumerId> {
        if reply_to::cancel(self.state, tag) {
            return None;
        }
        let consumer = self.state.consumers.remove(tag)?;
        consumer.queue.cancel(consumer.id).await;
        Some(consumer.id)
    }

    async fn get(&mut self, g: basic::Get, conn: &mut Connection) -> MethodResult {
        let name = self.state.queue_name(g.queue.as_str())?;
        let grants = self.grants();
        grants.authorize(Action::Read, &grants.queue_resource(&name))?;
        let queue = grants.vhost()?.queue(&name, self.client.id())?;
        let got = queue.get(self.owner(), g.no_ack).await?;
        self.state.touch(&queue);
        let queue_type = queue.config.queue_type;
        let Some(got) = got else {
            self.client.counters().add_typed(queue_type, TypedCounter::GetEmpty, 1);
            conn.send_method(self.channel, &AMQPClass::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {})));
            return Ok(());
        };
        let tag = self.state.tag();
        if !g.no_ack {
            let delivered_at = Instant::now();
            let pending =
                PendingAck { queue: Arc::clone(&queue), seq: got.delivery.seq, consumed: false, delivered_at };
            self.state.unacked.push(tag, pending);
            self.watch_oldest();
        }
        let how = if g.no_ack { TypedCounter::GetAutoAck } else { TypedCounter::GetManualAck };
        self.client.counters().add_typed(queue_type, how, 1);
        if got.delivery.redelivered {
            self.client.counters().add_typed(queue_type, TypedCounter::Redelivered, 1);
        }
        let message = &got.delivery.message;
        let ok = basic::GetOk {
            delivery_tag: tag,
            redelivered: got.delivery.redelivered,
            exchange: message.routing.exchange.as_str().into(),
            routing_key: message.routing.routing_key.as_str().into(),
            message_count: got.remaining,
        };
        conn.send_method(self.channel, &AMQPClass::Basic(basic::AMQPMethod::GetOk(ok)));
        super::deliver::send_content(conn, self.channel, message);
        Ok(())
    }

    async fn settle(&mut self, tag: u64, multiple: bool, how: Settle) -> MethodResult {
        if let Some(tx) = self.state.tx.as_mut() {
            // Out of the unacked set now (an unknown tag fails here, as in RabbitMQ), settled
            // with the queues at commit.
            let settled = self.state.unacked.take_tagged(tag, multiple).ok_or_else(|| unknown_tag(tag))?;
            tx.hold_settle(how, settled);
            self.watch_oldest();
            return Ok(());
        }
        let settled = self.state.unacked.take(tag, multiple).ok_or_else(|| unknown_tag(tag))?;
        self.watch_oldest();
        self.release(settled, how).await;
        Ok(())
    }

    async fn recover(&mut self, requeue: bool) -> MethodResult {
        if !requeue {
            return Err(MethodError::new(ReplyCode::NotImplemented, "requeue=false"));
        }
        let all = self.state.unacked.take_all();
        self.release(all, Settle::Requeue).await;
        Ok(())
    }

    /// Gives settled deliveries back to their queues and their units to the channel's global
    /// prefetch.
    pub(crate) async fn release(&mut self, settled: Vec<PendingAck>, how: Settle) {
        let consumed = settled.iter().filter(|p| p.consumed).count();
        for (queue, seqs) in by_queue(settled) {
            if how == Settle::Ack {
                let acked = u64::try_from(seqs.len()).unwrap_or(u64::MAX);
                self.client.counters().add_typed(queue.config.queue_type, TypedCounter::Acknowledged, acked);
            }
            queue.settle(seqs, how).await;
        }
        self.state.global_limit.release(u32::try_from(consumed).unwrap_or(u32::MAX));
    }
}
