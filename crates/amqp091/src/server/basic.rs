//! `basic.*` methods other than publish: consume, cancel, get, ack/nack/reject, qos, recover.

use std::sync::Arc;
use std::time::Instant;

use amq_protocol::protocol::{AMQPClass, basic};
use charon_engine::metrics::TypedCounter;
use charon_engine::reply_to::PSEUDO_QUEUE;
use charon_engine::{Action, ConsumeSpec, Settle};
use rand::Rng;

use super::channel::{PendingAck, by_queue};
use super::grants::Grants;
use super::reply_to;
use super::session::{ConsumerRoute, Session};
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

/// RabbitMQ's answer to an ack, nack or reject of a tag the channel does not hold.
fn unknown_tag(tag: u64) -> MethodError {
    MethodError::new(ReplyCode::PreconditionFailed, format!("unknown delivery tag {tag}"))
}

impl Session {
    pub(crate) async fn basic_method(
        &mut self,
        channel: u16,
        method: basic::AMQPMethod,
        conn: &mut Connection,
    ) -> MethodResult {
        match method {
            basic::AMQPMethod::Qos(qos) => {
                self.channel(channel)?.qos(qos.prefetch_count, qos.global);
                conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})));
                Ok(())
            }
            basic::AMQPMethod::Consume(c) if c.queue.as_str() == PSEUDO_QUEUE => {
                let grants = Grants { broker: &self.broker, client: &self.client };
                let state = self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?;
                reply_to::consume(grants, channel, state, &c, conn)
            }
            basic::AMQPMethod::Consume(c) => self.consume(channel, c, conn).await,
            basic::AMQPMethod::Cancel(c) => self.cancel(channel, c, conn).await,
            basic::AMQPMethod::Get(g) => self.get(channel, g, conn).await,
            basic::AMQPMethod::Ack(a) => self.settle(channel, a.delivery_tag, a.multiple, Settle::Ack).await,
            basic::AMQPMethod::Nack(n) => {
                let how = if n.requeue { Settle::Requeue } else { Settle::Discard };
                self.settle(channel, n.delivery_tag, n.multiple, how).await
            }
            basic::AMQPMethod::Reject(r) => {
                let how = if r.requeue { Settle::Requeue } else { Settle::Discard };
                self.settle(channel, r.delivery_tag, false, how).await
            }
            basic::AMQPMethod::Recover(r) => {
                self.recover(channel, r.requeue).await?;
                conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})));
                Ok(())
            }
            basic::AMQPMethod::RecoverAsync(r) => self.recover(channel, r.requeue).await,
            _ => Err(MethodError::new(ReplyCode::CommandInvalid, "unimplemented method")),
        }
    }

    async fn consume(&mut self, channel: u16, c: basic::Consume, conn: &mut Connection) -> MethodResult {
        let requested = c.consumer_tag.as_str();
        if !requested.is_empty() && self.channel(channel)?.consumers.contains_key(requested) {
            return Err(MethodError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{requested}'"),
            ));
        }
        let name = self.channel(channel)?.queue_name(c.queue.as_str())?;
        let grants = self.grants();
        grants.authorize(Action::Read, &grants.queue_resource(&name))?;
        let vhost = grants.vhost()?;
        let queue = vhost.queue(&name, self.client.id())?;
        let tag = if requested.is_empty() { generated_tag() } else { requested.to_owned() };
        let id = self.broker.next_id();
        let owner = self.owner(channel);
        let session = self.client.sink().clone();
        let state = self.channel(channel)?;
        let spec = ConsumeSpec {
            id,
            tag: tag.clone(),
            owner,
            session,
            no_ack: c.no_ack,
            prefetch: state.consumer_prefetch,
            link_credit: None,
            channel_limit: Some(Arc::clone(&state.global_limit)),
            exclusive: c.exclusive,
            arguments: arguments(&c.arguments),
        };
        queue.consume(spec).await?;
        let state = self.channel(channel)?;
        state.touch(&queue);
        state.consumers.insert(tag.clone(), super::channel::ChannelConsumer { id, queue: Arc::clone(&queue) });
        self.consumers.insert(id, ConsumerRoute { channel, tag: Arc::from(tag.as_str()), no_ack: c.no_ack, queue });
        if !c.nowait {
            let ok = basic::ConsumeOk { consumer_tag: tag.into() };
            conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(ok)));
        }
        Ok(())
    }

    async fn cancel(&mut self, channel: u16, c: basic::Cancel, conn: &mut Connection) -> MethodResult {
        let tag = c.consumer_tag.as_str().to_owned();
        if reply_to::cancel(self.channel(channel)?, &tag) {
            // The reply consumer; nothing queued for it.
        } else if let Some(consumer) = self.channel(channel)?.consumers.remove(&tag) {
            // The queue sends every delivery it made to this consumer before it answers, so
            // they are all in our inbox now; the driver writes them before cancel-ok (the
            // ordering RabbitMQ gets by having the queue send cancel-ok).
            consumer.queue.cancel(consumer.id).await;
            self.drain_inbox(conn);
            self.consumers.remove(&consumer.id);
        }
        if !c.nowait {
            let ok = basic::CancelOk { consumer_tag: tag.as_str().into() };
            conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::CancelOk(ok)));
        }
        Ok(())
    }

    async fn get(&mut self, channel: u16, g: basic::Get, conn: &mut Connection) -> MethodResult {
        let name = self.channel(channel)?.queue_name(g.queue.as_str())?;
        let grants = self.grants();
        grants.authorize(Action::Read, &grants.queue_resource(&name))?;
        let vhost = grants.vhost()?;
        let queue = vhost.queue(&name, self.client.id())?;
        let owner = self.owner(channel);
        let got = queue.get(owner, g.no_ack).await?;
        let state = self.channel(channel)?;
        state.touch(&queue);
        let queue_type = queue.config.queue_type;
        let Some(got) = got else {
            self.client.counters().add_typed(queue_type, TypedCounter::GetEmpty, 1);
            conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {})));
            return Ok(());
        };
        let tag = state.tag();
        if !g.no_ack {
            let delivered_at = Instant::now();
            let pending =
                PendingAck { queue: Arc::clone(&queue), seq: got.delivery.seq, consumed: false, delivered_at };
            state.unacked.push(tag, pending);
            self.watch_oldest(channel);
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
        conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::GetOk(ok)));
        super::deliver::send_content(conn, channel, message);
        Ok(())
    }

    async fn settle(&mut self, channel: u16, tag: u64, multiple: bool, how: Settle) -> MethodResult {
        let state = self.channel(channel)?;
        if let Some(tx) = state.tx.as_mut() {
            // Out of the unacked set now (an unknown tag fails here, as in RabbitMQ), settled
            // with the queues at commit.
            let settled = state.unacked.take_tagged(tag, multiple).ok_or_else(|| unknown_tag(tag))?;
            tx.hold_settle(how, settled);
            self.watch_oldest(channel);
            return Ok(());
        }
        let settled = state.unacked.take(tag, multiple).ok_or_else(|| unknown_tag(tag))?;
        self.watch_oldest(channel);
        self.release(channel, settled, how).await
    }

    async fn recover(&mut self, channel: u16, requeue: bool) -> MethodResult {
        if !requeue {
            return Err(MethodError::new(ReplyCode::NotImplemented, "requeue=false"));
        }
        let all = self.channel(channel)?.unacked.take_all();
        self.release(channel, all, Settle::Requeue).await
    }

    /// Gives settled deliveries back to their queues and their units to the channel's global
    /// prefetch.
    pub(crate) async fn release(&mut self, channel: u16, settled: Vec<PendingAck>, how: Settle) -> MethodResult {
        let consumed = settled.iter().filter(|p| p.consumed).count();
        let gate = Arc::clone(&self.channel(channel)?.global_limit);
        for (queue, seqs) in by_queue(settled) {
            if how == Settle::Ack {
                let acked = u64::try_from(seqs.len()).unwrap_or(u64::MAX);
                self.client.counters().add_typed(queue.config.queue_type, TypedCounter::Acknowledged, acked);
            }
            queue.settle(seqs, how).await;
        }
        gate.release(u32::try_from(consumed).unwrap_or(u32::MAX));
        Ok(())
    }

    /// Processes whatever engine events are already waiting, without blocking.
    fn drain_inbox(&mut self, conn: &mut Connection) {
        while let Some(event) = self.try_next_event() {
            self.handle_engine_event(event, conn);
        }
    }
}
