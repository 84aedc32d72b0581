//! Per-connection broker state, and dispatch of protocol and engine events.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use amq_protocol::protocol::{AMQPClass, basic, tx};
use charon_engine::login::Peer;
use charon_engine::metrics::Counter;
use charon_engine::{
    Broker, ChannelSlot, Client, ConsumerId, Credentials, Flush, Owner, Publisher, QueueRef, SessionEvent,
};

use super::ack_timeout::AckTimer;
use super::basic::Basic;
use super::channel::ChannelState;
use super::deliver::Deliveries;
use super::grants::Grants;
use super::publish::Publishing;
use super::reply_to;
use super::report::report;
use super::topology::Topology;
use super::tx_methods::{TxMethods, poll_commit};
use super::{MethodError, MethodResult};
use crate::proto::{Connection, ConnectionState, Event, Host, ReplyCode};

/// A consumer as the connection knows it.
#[derive(Clone, Debug)]
pub(crate) struct ConsumerRoute {
    pub(crate) channel: u16,
    pub(crate) tag: Arc<str>,
    pub(crate) no_ack: bool,
    /// The queue it consumes from, which its deliveries are settled through.
    pub(crate) queue: QueueRef,
}

/// A connection's broker state once the handshake began: its client, channels, consumers and
/// publisher. Method handlers borrow what they touch through views ([`Basic`],
/// [`Publishing`], [`TxMethods`], [`Topology`]); the driver reads the client (inbox, closing
/// line), the publisher (what holds it), the channels (the report) and the consumer-timeout
/// timer; the rest is the session's own.
pub(crate) struct Session {
    broker: Arc<Broker>,
    /// Who logged in, the vhost it opened, its connection slot and registration.
    pub(crate) client: Client,
    /// Open channels, counted against the user's `max-channels` until they close.
    counted_channels: HashMap<u16, ChannelSlot>,
    pub(crate) channels: HashMap<u16, ChannelState>,
    consumers: HashMap<ConsumerId, ConsumerRoute>,
    /// Exclusive queues this connection declared; deleted when it closes.
    exclusive: Vec<QueueRef>,
    /// Routes, and what was routed but not yet handed to the queues (in order; flushed after
    /// each socket read, and before any other method is acted on).
    pub(crate) publisher: Publisher,
    /// The client's method that came after the held publishes: acted on once they went.
    deferred: Option<Event>,
    /// Channels the broker closed whose close-ok has not come yet.
    closed_by_broker: HashSet<u16>,
    /// Channels whose `tx.commit` waits for its queues (few, and usually none).
    committing: Vec<u16>,
    /// Due when a channel's oldest unacked delivery may have timed out.
    pub(crate) ack_timer: AckTimer,
}

/// Checks logins and vhost access against the broker during the handshake.
pub(crate) struct Login<'a> {
    pub(crate) broker: &'a Broker,
    /// Who is logging in (address for the login policy, certificate for EXTERNAL).
    pub(crate) peer: &'a Peer,
    /// Set by a login attempt: how long the driver waits before its answer goes out.
    pub(crate) delay: &'a mut Duration,
    /// Who logged in and what it opened (the engine's, as for every protocol).
    pub(crate) client: &'a mut Client,
    pub(crate) counted_channels: &'a mut HashMap<u16, ChannelSlot>,
}

impl Login<'_> {
    /// Logs in with `credentials`; the name of the user it logged in as.
    fn login(&mut self, credentials: Credentials<'_>) -> Option<String> {
        *self.delay = self.client.login(self.broker, self.peer, credentials);
        self.client.user().map(|u| u.name.clone())
    }
}

impl Host for Login<'_> {
    fn authenticate(&mut self, mechanism: &str, username: &str, password: &str) -> bool {
        self.login(Credentials::Password { mechanism, username, password }).is_some()
    }

    fn authenticate_external(&mut self) -> Option<String> {
        self.login(Credentials::Certificate)
    }

    fn authenticate_anonymous(&mut self) -> Option<String> {
        self.login(Credentials::Anonymous)
    }

    fn open_vhost(&mut self, _username: &str, vhost: &str) -> Result<(), String> {
        self.client.open_vhost(self.broker, vhost).map_err(|e| e.to_string())
    }

    /// RabbitMQ counts a user's channels across its connections; one too many closes the
    /// connection (530, class and method 0) before its open-ok.
    fn open_channel(&mut self, channel: u16) -> Result<(), String> {
        let user = self.client.user().ok_or_else(|| "not authenticated".to_owned())?;
        let slot = self.broker.limits().open_channel(&user.name).map_err(|e| e.to_string())?;
        self.counted_channels.insert(channel, slot);
        Ok(())
    }
}

impl Session {
    /// The session of a connection whose client (name, inbox, sink) is `client`.
    pub(crate) fn new(broker: Arc<Broker>, client: Client) -> Self {
        let ack_timer = AckTimer::new(broker.consumer_timeout());
        Self {
            broker,
            publisher: Publisher::new(Some(client.sink().clone())),
            client,
            counted_channels: HashMap::new(),
            channels: HashMap::new(),
            consumers: HashMap::new(),
            exclusive: Vec::new(),
            deferred: None,
            closed_by_broker: HashSet::new(),
            committing: Vec::new(),
            ack_timer,
        }
    }

    pub(crate) fn try_next_event(&mut self) -> Option<SessionEvent> {
        self.client.inbox().try_recv().ok()
    }

    pub(crate) fn login<'a>(&'a mut self, peer: &'a Peer, delay: &'a mut Duration) -> Login<'a> {
        Login {
            broker: &self.broker,
            peer,
            delay,
            client: &mut self.client,
            counted_channels: &mut self.counted_channels,
        }
    }

    pub(crate) fn owner(&self, channel: u16) -> Owner {
        Owner { session: self.client.id(), channel: u32::from(channel) }
    }

    /// Closes every channel whose oldest delivery timed out at `now` (see [`AckTimer::expire`]).
    pub(crate) async fn expire_unacked(&mut self, now: Instant, conn: &mut Connection) {
        for (channel, error) in self.ack_timer.expire(&self.channels, now) {
            self.fail(channel, error, (0, 0), conn).await;
        }
    }

    /// The `exchange.*` and `queue.*` methods of `channel`, over what they touch.
    fn topology(&mut self, channel: u16) -> Result<Topology<'_>, MethodError> {
        let state = self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?;
        Ok(Topology {
            grants: Grants { broker: &self.broker, client: &self.client },
            channel: state,
            exclusive: &mut self.exclusive,
        })
    }

    /// The `basic.*` methods of `channel` but publish, over what they touch.
    fn basic(&mut self, channel: u16) -> Result<Basic<'_>, MethodError> {
        Ok(Basic {
            channel,
            state: self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?,
            broker: &self.broker,
            client: &mut self.client,
            consumers: &mut self.consumers,
            ack_timer: &mut self.ack_timer,
        })
    }

    /// `basic.publish` on `channel`, over what it touches.
    fn publishing(&mut self, channel: u16) -> Result<Publishing<'_>, MethodError> {
        Ok(Publishing {
            channel,
            state: self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?,
            broker: &self.broker,
            client: &mut self.client,
            publisher: &mut self.publisher,
        })
    }

    /// The `tx.*` methods of `channel`, over what they touch.
    fn tx(&mut self, channel: u16) -> Result<TxMethods<'_>, MethodError> {
        Ok(TxMethods {
            channel,
            state: self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?,
            publisher: &mut self.publisher,
            ack_timer: &mut self.ack_timer,
        })
    }

    /// Acts on one protocol event.
    pub(crate) async fn handle_event(&mut self, event: Event, conn: &mut Connection) {
        match event {
            Event::Opened { username, vhost } => {
                tracing::info!(
                    "connection {}: user '{username}' authenticated and granted access to vhost '{vhost}'",
                    self.client.name()
                );
            }
            Event::ChannelOpened(channel) => {
                self.closed_by_broker.remove(&channel);
                self.channels.insert(channel, ChannelState::new());
            }
            // Frames decoded in the same read as a method the broker then refused follow that
            // channel's close: RabbitMQ ignores them until close-ok, and so do we. (A channel
            // the client closed is different: what it sent before its close is acted on.)
            Event::Method(channel, _) | Event::Publish(channel, _) if self.closed_by_broker.contains(&channel) => {}
            Event::Method(channel, method) if self.committing.contains(&channel) => {
                let ids = (method.get_amqp_class_id(), method.get_amqp_method_id());
                self.fail(channel, MethodError::commit_in_progress(), ids, conn).await;
            }
            Event::Publish(channel, _) if self.committing.contains(&channel) => {
                self.fail(channel, MethodError::commit_in_progress(), (60, 40), conn).await;
            }
            Event::Method(channel, method) => {
                if !self.flush_publishes(conn, Flush::Hold).await {
                    // Held behind publishes a queue does not admit yet (flow): after them.
                    self.deferred = Some(Event::Method(channel, method));
                    return;
                }
                let ids = (method.get_amqp_class_id(), method.get_amqp_method_id());
                if let Err(error) = self.handle_method(channel, *method, conn).await {
                    self.fail(channel, error, ids, conn).await;
                }
            }
            Event::Publish(channel, command) => {
                if let Err(error) = self.publishing(channel).and_then(|p| p.publish(*command, conn)) {
                    self.fail(channel, error, (60, 40), conn).await;
                }
            }
            Event::PublishTooLarge { channel, size } => {
                let error = MethodError::new(
                    ReplyCode::PreconditionFailed,
                    format!("message size {size} is larger than configured max size {}", conn.max_message_size()),
                );
                self.fail(channel, error, (60, 40), conn).await;
            }
            Event::ChannelClosing(channel) => {
                self.counted_channels.remove(&channel);
                self.flush_publishes(conn, Flush::Force).await;
                self.client_closed(channel, conn).await;
            }
            Event::ChannelClosed(channel) => {
                self.closed_by_broker.remove(&channel);
                self.counted_channels.remove(&channel);
                self.flush_publishes(conn, Flush::Force).await;
                self.channel_gone(channel).await;
            }
            // Before close-ok reaches the socket (it goes out after this wake-up's events):
            // RabbitMQ deletes a connection's exclusive queues before it answers the close.
            Event::Closed => self.close_all().await,
        }
    }

    async fn handle_method(&mut self, channel: u16, method: AMQPClass, conn: &mut Connection) -> MethodResult {
        match method {
            AMQPClass::Exchange(m) => self.topology(channel)?.exchange_method(channel, m, conn).await,
            AMQPClass::Queue(m) => self.topology(channel)?.queue_method(channel, m, conn).await,
            AMQPClass::Basic(basic::AMQPMethod::Cancel(c)) => self.cancel(channel, &c, conn).await,
            AMQPClass::Basic(m) => self.basic(channel)?.method(m, conn).await,
            AMQPClass::Confirm(amq_protocol::protocol::confirm::AMQPMethod::Select(select)) => {
                self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?.select_confirms()?;
                if !select.nowait {
                    let ok = amq_protocol::protocol::confirm::SelectOk {};
                    conn.send_method(
                        channel,
                        &AMQPClass::Confirm(amq_protocol::protocol::confirm::AMQPMethod::SelectOk(ok)),
                    );
                }
                Ok(())
            }
            AMQPClass::Tx(tx::AMQPMethod::Commit(_)) => self.commit(channel, conn).await,
            AMQPClass::Tx(m) => self.tx(channel)?.method(m, conn),
            AMQPClass::Access(amq_protocol::protocol::access::AMQPMethod::Request(_)) => {
                let ok = amq_protocol::protocol::access::RequestOk {};
                conn.send_method(
                    channel,
                    &AMQPClass::Access(amq_protocol::protocol::access::AMQPMethod::RequestOk(ok)),
                );
                Ok(())
            }
            _ => Err(MethodError::new(ReplyCode::CommandInvalid, "unimplemented method")),
        }
    }

    /// `basic.cancel`: the consumer stops; the deliveries its queue made to it before are in
    /// the inbox by then and are written before cancel-ok (the ordering RabbitMQ gets by
    /// having the queue send cancel-ok).
    async fn cancel(&mut self, channel: u16, c: &basic::Cancel, conn: &mut Connection) -> MethodResult {
        if let Some(consumer) = self.basic(channel)?.cancel(c.consumer_tag.as_str()).await {
            self.drain_inbox(conn);
            self.consumers.remove(&consumer);
        }
        if !c.nowait {
            let ok = basic::CancelOk { consumer_tag: c.consumer_tag.clone() };
            conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::CancelOk(ok)));
        }
        Ok(())
    }

    /// Processes whatever engine events are already waiting, without blocking.
    fn drain_inbox(&mut self, conn: &mut Connection) {
        while let Some(event) = self.try_next_event() {
            self.handle_engine_event(event, conn);
        }
    }

    /// `tx.commit`: delivers the held publishes, then settles the held deliveries;
    /// `tx.commit-ok` goes once the queues confirmed the publishes, now or from
    /// [`Self::finish_commits`].
    async fn commit(&mut self, channel: u16, conn: &mut Connection) -> MethodResult {
        let settles = self.tx(channel)?.begin_commit(conn)?;
        self.flush_publishes(conn, Flush::Force).await;
        for settle in settles {
            let deliveries = settle.deliveries.into_iter().map(|(_, pending)| pending).collect();
            self.basic(channel)?.release(deliveries, settle.how).await;
        }
        let tx = self.channels.get_mut(&channel).and_then(|state| state.tx.as_mut());
        match tx.and_then(|tx| poll_commit(channel, tx, conn)) {
            Some(done) => done,
            None => {
                self.committing.push(channel);
                Ok(())
            }
        }
    }

    /// Answers the commits whose queues have all confirmed since; called after engine events.
    pub(crate) async fn finish_commits(&mut self, conn: &mut Connection) {
        if self.committing.is_empty() {
            return;
        }
        for channel in std::mem::take(&mut self.committing) {
            let Some(tx) = self.channels.get_mut(&channel).and_then(|state| state.tx.as_mut()) else {
                continue;
            };
            match poll_commit(channel, tx, conn) {
                Some(Ok(())) => {}
                Some(Err(error)) => self.fail(channel, error, (90, 20), conn).await,
                None => self.committing.push(channel),
            }
        }
    }

    /// Hands the routed publishes to their queues ([`Flush::Hold`]: a queue holding its
    /// publishers stops them, and the connection holds its socket and what the client sent
    /// after them until the queue admits them, [`Self::resume`]; [`Flush::Force`] when the
    /// channel or connection goes away, or a transaction commits); true when all went. A
    /// queue gone between routing and enqueueing confirms its messages, as RabbitMQ does for
    /// unroutable ones.
    pub(crate) async fn flush_publishes(&mut self, conn: &mut Connection, mode: Flush) -> bool {
        for (channel, seqs) in self.publisher.flush(mode).await {
            let state = u16::try_from(channel).ok().and_then(|channel| self.channels.get_mut(&channel));
            if let Some(state) = state {
                for seq in seqs {
                    state.answer_confirm(seq, true);
                }
            }
        }
        self.emit_confirms(conn);
        !self.publisher.held()
    }

    /// Whether a queue holds this connection's publishes (flow): the socket is not read
    /// meanwhile, and the management API shows the connection in `flow`.
    pub(crate) fn held(&self) -> bool {
        self.publisher.held()
    }

    /// Goes on where a hold stopped: the held publishes, then the event it deferred. False
    /// while a queue still holds them.
    pub(crate) async fn resume(&mut self, conn: &mut Connection) -> bool {
        if !self.held() {
            return true;
        }
        if !self.flush_publishes(conn, Flush::Hold).await {
            return false;
        }
        if let Some(event) = self.deferred.take() {
            Box::pin(self.handle_event(event, conn)).await;
        }
        !self.held()
    }

    /// Reports a failed method: soft errors close the channel, hard ones the connection.
    pub(crate) async fn fail(&mut self, channel: u16, error: MethodError, ids: (u16, u16), conn: &mut Connection) {
        tracing::debug!(channel, code = error.code.code(), explanation = error.explanation, "method failed");
        if error.code.is_hard() {
            conn.close(error.code, &error.explanation, ids, Instant::now());
        } else {
            conn.close_channel(channel, error.code, &error.explanation, ids);
            self.closed_by_broker.insert(channel);
            self.flush_publishes(conn, Flush::Force).await;
            self.channel_gone(channel).await;
        }
    }

    /// A channel ended: its consumers go and the queues it used requeue what it had not
    /// settled.
    pub(crate) async fn channel_gone(&mut self, channel: u16) {
        self.release_channel(channel).await;
        self.forget_channel(channel);
    }

    /// The client closed `channel`. Its consumers go and its unacknowledged deliveries return
    /// to their queues at once; `close-ok` waits for the confirms still owed for what it
    /// published, which go out first (every queue answers: see `ConfirmTracker`), so a
    /// client never gets an ack on a channel it already freed.
    async fn client_closed(&mut self, channel: u16, conn: &mut Connection) {
        self.release_channel(channel).await;
        match self.channels.get_mut(&channel) {
            Some(state) if state.confirms.as_ref().is_some_and(super::confirms::ConfirmTracker::is_waiting) => {
                state.closing = true;
            }
            _ => {
                self.forget_channel(channel);
                conn.close_ok_channel(channel);
            }
        }
    }

    /// Lets go of what a channel holds in queues and of what it would still deliver: its
    /// consumers, its unacknowledged deliveries (the queues requeue them), its direct
    /// reply-to address and an open transaction. Its confirms stay.
    async fn release_channel(&mut self, channel: u16) {
        self.committing.retain(|c| *c != channel);
        let Some(state) = self.channels.get_mut(&channel) else {
            return;
        };
        let queues = std::mem::take(&mut state.queues);
        state.consumers.clear();
        state.unacked.take_all();
        state.reply = None;
        state.tx = None;
        self.consumers.retain(|_, route| route.channel != channel);
        let owner = self.owner(channel);
        for queue in &queues {
            queue.owner_closed(owner).await;
        }
    }

    fn forget_channel(&mut self, channel: u16) {
        if self.channels.remove(&channel).is_some_and(|state| state.published) {
            self.client.publisher_gone();
        }
    }

    /// The connection ended: every channel goes, then its exclusive queues are deleted.
    pub(crate) async fn close_all(&mut self) {
        let channels: Vec<u16> = self.channels.keys().copied().collect();
        for channel in channels {
            self.channel_gone(channel).await;
        }
        if let Some(vhost) = self.client.vhost().cloned() {
            for queue in std::mem::take(&mut self.exclusive) {
                vhost.drop_queue(&queue).await;
            }
        }
    }

    /// Acts on one engine event.
    pub(crate) fn handle_engine_event(&mut self, event: SessionEvent, conn: &mut Connection) {
        if conn.state() != ConnectionState::Running {
            // After a connection.close, ours or the client's, nothing goes out but close-ok:
            // the queues requeue what they still send once the channels' owner is gone (or drop
            // it, unacknowledged, as RabbitMQ does). The window units come back all the same.
            match event {
                SessionEvent::Deliveries { items, .. } => {
                    self.client.sink().outbound.release(u32::try_from(items.len()).unwrap_or(u32::MAX));
                }
                SessionEvent::Reply { .. } => self.client.sink().outbound.release(1),
                SessionEvent::Report(reply) => {
                    let _ = reply.send(report(&self.channels, conn, None));
                }
                _ => {}
            }
            return;
        }
        match event {
            SessionEvent::Deliveries { consumer, items } => {
                // Room in the connection's outbound window comes back whatever happens.
                let count = u32::try_from(items.len()).unwrap_or(u32::MAX);
                let route = self.consumers.get(&consumer);
                if let Some((route, channel)) = route.and_then(|r| Some((r, self.channels.get_mut(&r.channel)?))) {
                    let view = Deliveries { channel, counters: self.client.counters(), ack_timer: &mut self.ack_timer };
                    view.deliver(route, items, conn);
                }
                // Deliveries for a consumer that is gone were requeued by the queue when its
                // channel closed (or were no-ack and are dropped, as in RabbitMQ).
                self.client.sink().outbound.release(count);
            }
            SessionEvent::ConsumerCancelled { consumer } => self.consumer_cancelled(consumer, conn),
            SessionEvent::CreditState { .. } => {}
            SessionEvent::Reply { channel, consumer, message } => {
                let channel = u16::try_from(channel).ok();
                if let Some((channel, state)) = channel.and_then(|ch| Some((ch, self.channels.get(&ch)?))) {
                    reply_to::deliver(channel, state, consumer, &message, conn);
                }
                // Either way the reply's unit of the outbound window comes back.
                self.client.sink().outbound.release(1);
            }
            SessionEvent::ForceClose { reason } => {
                conn.close(ReplyCode::ConnectionForced, &reason, (0, 0), Instant::now());
            }
            SessionEvent::Report(reply) => {
                let _ = reply.send(report(&self.channels, conn, None));
            }
            SessionEvent::Confirms { channel, accepted, refused } => {
                let Ok(channel) = u16::try_from(channel) else {
                    return;
                };
                if let Some(state) = self.channels.get_mut(&channel) {
                    for seq in accepted {
                        state.answer_confirm(seq, true);
                    }
                    for seq in refused {
                        state.answer_confirm(seq, false);
                    }
                }
            }
        }
    }

    /// Sends every confirm that became ready, then `close-ok` for a closing channel that owes
    /// none any more. Nothing once the connection is closing.
    pub(crate) fn emit_confirms(&mut self, conn: &mut Connection) {
        if conn.state() != ConnectionState::Running {
            return;
        }
        let mut answered = Vec::new();
        for (channel, state) in &mut self.channels {
            let Some(tracker) = state.confirms.as_mut() else {
                continue;
            };
            self.client.counters().add(Counter::Confirmed, tracker.acked());
            for (seq, ack, multiple) in tracker.drain() {
                if ack {
                    crate::codec::put_ack(conn.output(), *channel, seq, multiple);
                } else {
                    crate::codec::put_nack(conn.output(), *channel, seq, multiple);
                }
            }
            if state.closing && !tracker.is_waiting() {
                answered.push(*channel);
            }
        }
        for channel in answered {
            self.forget_channel(channel);
            conn.close_ok_channel(channel);
        }
    }

    /// Folds this connection's counts into the node's (see [`Client::fold_counters`]).
    pub(crate) fn fold_counters(&mut self) {
        self.client.fold_counters(self.consumers.len());
    }

    fn consumer_cancelled(&mut self, consumer: ConsumerId, conn: &mut Connection) {
        let Some(route) = self.consumers.remove(&consumer) else {
            return;
        };
        if let Some(state) = self.channels.get_mut(&route.channel) {
            state.consumers.remove(&*route.tag);
        }
        if conn.capabilities().consumer_cancel_notify && conn.is_channel_open(route.channel) {
            let cancel =
                amq_protocol::protocol::basic::Cancel { consumer_tag: route.tag.as_ref().into(), nowait: true };
            conn.send_method(
                route.channel,
                &AMQPClass::Basic(amq_protocol::protocol::basic::AMQPMethod::Cancel(cancel)),
            );
        }
    }
}
