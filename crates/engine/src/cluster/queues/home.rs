//! The home node's side: its queues serve the sessions of other nodes.
//!
//! Each remote session (a connection on another node that consumes from or gets from a queue
//! of this node) has a session of this node standing for it: an id of this node's, a
//! [`SessionSink`] its queues deliver and cancel into, and the channels it used. (A publish
//! needs none: it is answered with its confirms.) The other node polls that sink's events
//! ([`Request::Poll`]); the deliveries it takes give their units of the sink's outbound window
//! back, so a consumer that does not read is not sent more than the window. A session goes
//! when its node says it closed, when its last channel here closed, when its node is down, or
//! when its node started again: its unacknowledged deliveries return to their queues as for a
//! connection that closed.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedReceiver;

use super::wire::{self, Counters, Delivered, Envelope, Event, Refusal, Reply, Request};
use crate::queue::{ConfirmTo, ConsumeSpec, CreditGrant, Enqueue, QueueRef};
use crate::session::{ConsumerId, Owner, SessionEvent, SessionId, SessionSink};

/// How many deliveries a remote session may hold that its node has not taken yet.
const REMOTE_WINDOW: u32 = 1024;
/// How long after its last request a node whose pings go unanswered keeps its sessions (an
/// active link asks at least every [`POLL_WAIT`]).
const HEARD: Duration = Duration::from_secs(5);
/// How long a poll waits for a first event before it answers with none.
const POLL_WAIT: Duration = Duration::from_secs(1);
/// Most events one poll answers.
const POLL_MAX: usize = 512;

/// A remote session by node, run and session number.
type Key = (String, u64, SessionId);

/// One remote session.
struct Remote {
    /// This node's number for it.
    id: SessionId,
    sink: SessionSink,
    events: tokio::sync::Mutex<UnboundedReceiver<SessionEvent>>,
    /// This node's consumer ids to the other node's.
    consumers: Mutex<HashMap<ConsumerId, ConsumerId>>,
    /// The queues and channels it used, told when it goes.
    used: Mutex<Vec<(QueueRef, u32)>>,
}

impl Remote {
    fn local_consumer(&self, remote: ConsumerId) -> Option<ConsumerId> {
        self.consumers.lock().iter().find(|(_, r)| **r == remote).map(|(local, _)| *local)
    }

    fn used(&self, queue: &QueueRef, channel: u32) {
        let mut used = self.used.lock();
        if !used.iter().any(|(q, c)| Arc::ptr_eq(q, queue) && *c == channel) {
            used.push((Arc::clone(queue), channel));
        }
    }

    /// Its channels are closed on every queue it used: their deliveries go back.
    async fn close(&self) {
        let used = std::mem::take(&mut *self.used.lock());
        for (queue, channel) in used {
            queue.owner_closed(Owner { session: self.id, channel }).await;
        }
    }

    /// What its queues told it since the last poll, waiting [`POLL_WAIT`] for the first.
    async fn poll(&self) -> (Vec<Event>, Vec<Arc<charon_model::Message>>) {
        let mut events = self.events.lock().await;
        let mut taken = Vec::new();
        if let Ok(Some(first)) = tokio::time::timeout(POLL_WAIT, events.recv()).await {
            taken.push(first);
            while taken.len() < POLL_MAX {
                match events.try_recv() {
                    Ok(event) => taken.push(event),
                    Err(_) => break,
                }
            }
        }
        drop(events);
        let consumers = self.consumers.lock().clone();
        let remote = |local: ConsumerId| consumers.get(&local).copied().unwrap_or_default();
        let (mut out, mut messages, mut delivered) = (Vec::new(), Vec::new(), 0u32);
        for event in taken {
            match event {
                SessionEvent::Deliveries { consumer, items } => {
                    delivered = delivered.saturating_add(u32::try_from(items.len()).unwrap_or(u32::MAX));
                    let facts = items
                        .iter()
                        .map(|d| Delivered { seq: d.seq, redelivered: d.redelivered, delivery_count: d.delivery_count })
                        .collect();
                    messages.extend(items.into_iter().map(|d| d.message));
                    out.push(Event::Deliveries { consumer: remote(consumer), items: facts });
                }
                SessionEvent::ConsumerCancelled { consumer } => {
                    out.push(Event::Cancelled { consumer: remote(consumer) });
                }
                SessionEvent::CreditState { consumer, delivery_count, credit, available, drain } => {
                    out.push(Event::CreditState {
                        consumer: remote(consumer),
                        delivery_count,
                        credit,
                        available,
                        drain,
                    });
                }
                SessionEvent::ForceClose { reason } => out.push(Event::ForceClose { reason }),
                // Not sent to a remote session: confirms are a publish request's answer, direct
                // reply-to and reports are this node's connections' own.
                SessionEvent::Confirms { .. } | SessionEvent::Reply { .. } | SessionEvent::Report(_) => {}
            }
        }
        // Handed over: the other node bounds them with its connection's own window.
        self.sink.outbound.release(delivered);
        (out, messages)
    }
}

/// The sessions of other nodes that use this node's queues, and the answers to their
/// requests.
pub struct Home {
    broker: Weak<crate::Broker>,
    sessions: Mutex<HashMap<Key, Arc<Remote>>>,
    /// The latest run seen of each node, and when it last asked something.
    boots: Mutex<HashMap<String, (u64, Instant)>>,
}

impl Home {
    /// Answers for `broker`'s queues.
    #[must_use]
    pub fn new(broker: &Arc<crate::Broker>) -> Self {
        Self { broker: Arc::downgrade(broker), sessions: Mutex::default(), boots: Mutex::default() }
    }

    /// Answers one request's body.
    pub async fn answer(&self, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let (envelope, messages): (Envelope, _) = wire::decode(body).map_err(|e| e.to_string())?;
        let (reply, out) = self.reply(envelope, messages).await;
        Ok(wire::encode(&reply, &out))
    }

    fn remote(&self, from: &str, boot: u64, session: SessionId) -> Result<Arc<Remote>, String> {
        let broker = self.broker.upgrade().ok_or("the node is stopping")?;
        let mut sessions = self.sessions.lock();
        let remote = sessions.entry((from.to_owned(), boot, session)).or_insert_with(|| {
            let (sink, events) = SessionSink::new(broker.next_id(), REMOTE_WINDOW);
            Arc::new(Remote {
                id: sink.id,
                sink,
                events: tokio::sync::Mutex::new(events),
                consumers: Mutex::default(),
                used: Mutex::default(),
            })
        });
        Ok(Arc::clone(remote))
    }

    fn queue(&self, queue: &wire::QueueName) -> Result<QueueRef, Refusal> {
        let broker = self.broker.upgrade().ok_or(Refusal::NotFound)?;
        let vhost = broker.vhost(&queue.vhost).ok_or(Refusal::NotFound)?;
        vhost.queue_here(&queue.name).ok_or(Refusal::NotFound)
    }

    async fn reply(
        &self,
        envelope: Envelope,
        messages: Vec<charon_model::Message>,
    ) -> (Reply, Vec<Arc<charon_model::Message>>) {
        let (from, boot) = (envelope.from.as_str(), envelope.boot);
        self.new_run(from, boot).await;
        let remote = |session| self.remote(from, boot, session);
        let refused = |text: String| Reply::Refused(Refusal::Other { precondition: false, text });
        let reply = match envelope.request {
            Request::Poll { session } => {
                let remote = match remote(session) {
                    Ok(remote) => remote,
                    Err(e) => return (refused(e), Vec::new()),
                };
                let (events, messages) = remote.poll().await;
                return (Reply::Events(events), messages);
            }
            Request::Close { session } => {
                let gone = self.sessions.lock().remove(&(from.to_owned(), boot, session));
                if let Some(remote) = gone {
                    remote.close().await;
                }
                Reply::Done
            }
            Request::Replies { addresses } => {
                if let Some(broker) = self.broker.upgrade() {
                    for (address, message) in addresses.iter().zip(messages) {
                        broker.reply_consumers().deliver(address, &Arc::new(message));
                    }
                }
                Reply::Done
            }
            Request::ReplyLive { address } => {
                let live = self.broker.upgrade().is_some_and(|b| b.reply_consumers().is_live(&address));
                Reply::Count(u32::from(live))
            }
            Request::Http(request) => {
                let service = request.service.clone();
                match self.broker.upgrade() {
                    Some(broker) => match broker.services().answer(request).await {
                        Some(answer) => Reply::Http(answer),
                        None => refused(format!("no service '{service}' on this node")),
                    },
                    None => refused("the node is stopping".into()),
                }
            }
            Request::Redrive { vhost, id, control } => match self.broker.upgrade() {
                Some(broker) => Reply::Redrive(broker.redrives().control_here(&broker, &vhost, &id, control).await),
                None => refused("the node is stopping".into()),
            },
            Request::ReplicaStatus { group } => {
                let cluster = self.broker.upgrade().and_then(|b| b.cluster().map(|c| c.replicas().status(group)));
                Reply::ReplicaStatus(cluster.flatten())
            }
            request => match self.on_queue(from, boot, request, messages).await {
                Ok((reply, out)) => return (reply, out),
                Err(refusal) => Reply::Refused(refusal),
            },
        };
        (reply, Vec::new())
    }

    async fn on_queue(
        &self,
        from: &str,
        boot: u64,
        request: Request,
        messages: Vec<charon_model::Message>,
    ) -> Result<(Reply, Vec<Arc<charon_model::Message>>), Refusal> {
        let remote = |session| self.remote(from, boot, session);
        let other = |text: String| Refusal::Other { precondition: false, text };
        let done = (Reply::Done, Vec::new());
        match request {
            Request::Publish { queue, runs } => {
                let queue = self.queue(&queue)?;
                if runs.iter().map(|r| r.numbers.len()).sum::<usize>() != messages.len() {
                    return Err(other("runs and messages do not match".into()));
                }
                Ok((Reply::Published(Self::publish(&queue, runs, messages).await?), Vec::new()))
            }
            Request::Consume {
                queue,
                session,
                consumer,
                tag,
                channel,
                no_ack,
                prefetch,
                link_credit,
                exclusive,
                arguments,
            } => {
                let queue = self.queue(&queue)?;
                let remote = remote(session).map_err(other)?;
                let broker = self.broker.upgrade().ok_or(Refusal::NotFound)?;
                let local = broker.next_id();
                remote.consumers.lock().insert(local, consumer);
                let spec = ConsumeSpec {
                    id: local,
                    tag,
                    owner: Owner { session: remote.id, channel },
                    session: remote.sink.clone(),
                    no_ack,
                    prefetch,
                    link_credit,
                    channel_limit: None,
                    exclusive,
                    arguments: arguments.decode().map_err(other)?,
                };
                remote.used(&queue, channel);
                match queue.consume(spec).await {
                    Ok(()) => Ok(done),
                    Err(e) => {
                        remote.consumers.lock().remove(&local);
                        Err(Refusal::of(&e))
                    }
                }
            }
            Request::Cancel { queue, session, consumer } => {
                let queue = self.queue(&queue)?;
                let remote = remote(session).map_err(other)?;
                let found = match remote.local_consumer(consumer) {
                    Some(local) => queue.cancel(local).await,
                    None => false,
                };
                Ok((Reply::Count(u32::from(found)), Vec::new()))
            }
            Request::Settle { queue, seqs, how } => {
                self.queue(&queue)?.settle(seqs, how.into()).await;
                Ok(done)
            }
            Request::SettleModified { queue, seqs, failed, annotations } => {
                let annotations = annotations.decode().map_err(other)?;
                self.queue(&queue)?.settle_modified(seqs, failed, annotations).await;
                Ok(done)
            }
            Request::Get { queue, session, channel, no_ack } => {
                let queue = self.queue(&queue)?;
                let remote = remote(session).map_err(other)?;
                remote.used(&queue, channel);
                let got =
                    queue.get(Owner { session: remote.id, channel }, no_ack).await.map_err(|e| Refusal::of(&e))?;
                Ok(match got {
                    Some(ok) => {
                        let d = &ok.delivery;
                        let facts =
                            Delivered { seq: d.seq, redelivered: d.redelivered, delivery_count: d.delivery_count };
                        (Reply::Got(Some((facts, ok.remaining))), vec![ok.delivery.message])
                    }
                    None => (Reply::Got(None), Vec::new()),
                })
            }
            Request::Purge { queue } => {
                let purged = self.queue(&queue)?.purge().await.map_err(|e| Refusal::of(&e))?;
                Ok((Reply::Count(purged), Vec::new()))
            }
            Request::Stats { queue, declared } => {
                let queue = self.queue(&queue)?;
                let stats = if declared { queue.declared().await } else { queue.stats().await };
                Ok((Reply::Stats(Counters::from(&stats.map_err(|e| Refusal::of(&e))?)), Vec::new()))
            }
            Request::OwnerClosed { queue, session, channel } => {
                let queue = self.queue(&queue)?;
                let remote = remote(session).map_err(other)?;
                queue.owner_closed(Owner { session: remote.id, channel }).await;
                let unused = {
                    let mut used = remote.used.lock();
                    used.retain(|(q, c)| !(Arc::ptr_eq(q, &queue) && *c == channel));
                    used.is_empty()
                };
                if unused {
                    self.sessions.lock().remove(&(from.to_owned(), boot, session));
                }
                Ok(done)
            }
            Request::Credit { queue, session, consumer, delivery_count, link_credit, drain, echo } => {
                let queue = self.queue(&queue)?;
                let remote = remote(session).map_err(other)?;
                if let Some(local) = remote.local_consumer(consumer) {
                    queue.credit(CreditGrant { consumer: local, delivery_count, link_credit, drain, echo }).await;
                }
                Ok(done)
            }
            Request::Poll { .. }
            | Request::Close { .. }
            | Request::Replies { .. }
            | Request::ReplyLive { .. }
            | Request::Redrive { .. }
            | Request::ReplicaStatus { .. }
            | Request::Http(_) => Err(other("not a queue request".into())),
        }
    }

    /// Publishes each run, waiting while the queue holds its publishers back (so the other
    /// node's publishers wait too), then for the queue's confirms of the runs that want them.
    async fn publish(
        queue: &QueueRef,
        runs: Vec<wire::Run>,
        messages: Vec<charon_model::Message>,
    ) -> Result<Vec<wire::Outcome>, Refusal> {
        // The confirms of this request come back here, each run's on the channel of its index.
        let (sink, mut confirms) = SessionSink::new(0, 0);
        let mut messages = messages.into_iter();
        let mut expected = 0;
        for (index, run) in runs.iter().enumerate() {
            let items: Vec<Enqueue> = run
                .numbers
                .iter()
                .zip(messages.by_ref())
                .map(|(number, message)| Enqueue { message: Arc::new(message), confirm: *number })
                .collect();
            let confirm_to = run
                .confirm
                .then(|| ConfirmTo { session: sink.clone(), channel: u32::try_from(index).unwrap_or(u32::MAX) });
            if run.confirm {
                expected += run.numbers.iter().flatten().count();
            }
            if !queue.publish(items, confirm_to).await {
                return Err(Refusal::NotFound);
            }
        }
        drop(sink);
        let mut outcomes = vec![wire::Outcome::default(); runs.len()];
        while expected > 0 {
            // Every holder of the sink gone: the queue stopped before it answered them all; the
            // rest are refused (their publishers send them again).
            let Some(event) = confirms.recv().await else {
                for (outcome, run) in outcomes.iter_mut().zip(&runs) {
                    let answered: Vec<u64> = outcome.accepted.iter().chain(&outcome.refused).copied().collect();
                    let missing = run.numbers.iter().flatten().filter(|n| !answered.contains(n));
                    outcome.refused.extend(missing.filter(|_| run.confirm));
                }
                break;
            };
            if let SessionEvent::Confirms { channel, accepted, refused } = event
                && let Some(outcome) = outcomes.get_mut(usize::try_from(channel).unwrap_or(usize::MAX))
            {
                expected = expected.saturating_sub(accepted.len() + refused.len());
                outcome.accepted.extend(accepted);
                outcome.refused.extend(refused);
            }
        }
        Ok(outcomes)
    }

    /// Notes `boot` as `node`'s run; a node that started again has its earlier run's sessions
    /// closed at once, before its request is answered: what they held is back in the queues
    /// for the new run to find.
    async fn new_run(&self, node: &str, boot: u64) {
        let previous = {
            // Every request comes here: no allocation but a node's first.
            let mut boots = self.boots.lock();
            match boots.get_mut(node) {
                Some(seen) => Some(std::mem::replace(seen, (boot, Instant::now())).0),
                None => boots.insert(node.to_owned(), (boot, Instant::now())).map(|(previous, _)| previous),
            }
        };
        if previous.is_none_or(|previous| previous == boot) {
            return;
        }
        let gone: Vec<Arc<Remote>> = {
            let mut sessions = self.sessions.lock();
            let stale: Vec<Key> = sessions.keys().filter(|(n, b, _)| n == node && *b != boot).cloned().collect();
            stale.iter().filter_map(|key| sessions.remove(key)).collect()
        };
        for remote in gone {
            remote.close().await;
        }
    }

    /// Closes the sessions of nodes that are not running, and of earlier runs of a node.
    pub async fn reap(&self, running: &(dyn Fn(&str) -> bool + Sync)) {
        let gone: Vec<Arc<Remote>> = {
            let boots = self.boots.lock();
            let mut sessions = self.sessions.lock();
            let stale: Vec<Key> = sessions
                .keys()
                .filter(|(node, boot, _)| match boots.get(node) {
                    Some((latest, _)) if latest != boot => true,
                    // A node its pings call down that still asks (it started again and its
                    // pings are not answered yet, or only they are lost) keeps its sessions.
                    Some((_, heard)) => !running(node) && heard.elapsed() > HEARD,
                    None => !running(node),
                })
                .cloned()
                .collect();
            stale.iter().filter_map(|key| sessions.remove(key)).collect()
        };
        for remote in gone {
            remote.close().await;
        }
    }
}

impl charon_cluster::transport::Dispatch for Home {
    fn answer(
        &self,
        _group: u64,
        _kind: charon_cluster::transport::frame::Kind,
        body: Vec<u8>,
    ) -> charon_cluster::transport::Answering<'_> {
        Box::pin(Home::answer(self, body))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use bytes::Bytes;
    use charon_model::{Body, Message, Routing};

    use super::*;
    use crate::cluster::queues::wire::{Outcome, QueueName, Run};

    fn request(boot: u64, request: Request, messages: &[Arc<Message>]) -> Vec<u8> {
        wire::encode(&Envelope { from: "n2".into(), boot, request }, messages)
    }

    async fn ask(home: &Home, body: Vec<u8>) -> (Reply, Vec<Message>) {
        wire::decode(home.answer(body).await.unwrap()).unwrap()
    }

    fn queue() -> QueueName {
        QueueName { vhost: "/".into(), name: "q".into() }
    }

    /// Polls until an event comes (a queue answers on its own task).
    async fn poll(home: &Home, boot: u64, session: SessionId) -> (Vec<Event>, Vec<Message>) {
        for _ in 0..20 {
            let (reply, messages) = ask(home, request(boot, Request::Poll { session }, &[])).await;
            match reply {
                Reply::Events(events) if !events.is_empty() => return (events, messages),
                Reply::Events(_) => {}
                other => panic!("{other:?}"),
            }
        }
        panic!("no events")
    }

    #[tokio::test]
    async fn a_remote_session_publishes_consumes_within_its_prefetch_and_gives_back_what_it_held_when_gone() {
        let broker = crate::Broker::new(crate::BrokerConfig::default());
        let vhost = broker.vhost("/").unwrap();
        let declare = crate::QueueDeclare { name: "q".into(), ..Default::default() };
        vhost.declare_queue(&declare, 1).await.unwrap();
        let home = Home::new(&broker);

        let messages: Vec<Arc<Message>> = (0..3u8)
            .map(|i| {
                let routing = Routing { routing_key: "q".into(), ..Routing::default() };
                Arc::new(Message::new(routing, Body::Data(Bytes::from(vec![i]))))
            })
            .collect();
        let runs =
            vec![Run { confirm: true, numbers: vec![Some(1), Some(2)] }, Run { confirm: false, numbers: vec![None] }];
        let publish = Request::Publish { queue: queue(), runs };
        let outcome = Outcome { accepted: vec![1, 2], refused: vec![] };
        assert_eq!(
            ask(&home, request(1, publish, &messages)).await.0,
            Reply::Published(vec![outcome, Outcome::default()])
        );

        let consume = Request::Consume {
            queue: queue(),
            session: 5,
            consumer: 77,
            tag: "c".into(),
            channel: 2,
            no_ack: false,
            prefetch: 2,
            link_credit: None,
            exclusive: false,
            arguments: crate::cluster::metadata::EncodedTable::new(&charon_model::Table::new()),
        };
        assert_eq!(ask(&home, request(1, consume, &[])).await.0, Reply::Done);
        let (events, bodies) = poll(&home, 1, 5).await;
        let Event::Deliveries { consumer, items } = &events[0] else { panic!("{events:?}") };
        assert_eq!((*consumer, items.len()), (77, 2));
        assert_eq!(bodies.iter().map(|m| m.body.bytes()[0]).collect::<Vec<_>>(), [0, 1]);
        let stats = vhost.queue("q", 1).unwrap().stats().await.unwrap();
        assert_eq!((stats.ready, stats.unacked, stats.consumers), (1, 2, 1));

        // The same node started again: its earlier run's session is closed before its first
        // request is answered, and what it held is back in the queue for that request.
        let again = Request::Get { queue: queue(), session: 5, channel: 1, no_ack: true };
        let (got, _) = ask(&home, request(2, again, &[])).await;
        assert!(matches!(got, Reply::Got(Some((Delivered { redelivered: true, .. }, 2)))), "{got:?}");
        let stats = vhost.queue("q", 1).unwrap().stats().await.unwrap();
        assert_eq!((stats.ready, stats.unacked, stats.consumers), (2, 0, 0));

        // A node its pings call down: its sessions stay while it still asks (it started again
        // and its pings are not answered yet), and go once it has been silent for a while.
        let get = Request::Get { queue: queue(), session: 6, channel: 1, no_ack: false };
        assert!(matches!(ask(&home, request(2, get, &[])).await.0, Reply::Got(Some((_, 1)))));
        home.reap(&|node| node != "n2").await;
        assert_eq!(vhost.queue("q", 1).unwrap().stats().await.unwrap().unacked, 1);
        tokio::time::pause();
        tokio::time::advance(HEARD + Duration::from_secs(1)).await;
        home.reap(&|node| node != "n2").await;
        let stats = vhost.queue("q", 1).unwrap().stats().await.unwrap();
        assert_eq!((stats.ready, stats.unacked), (2, 0));

        // A queue this node does not have.
        let missing = Request::Purge { queue: QueueName { vhost: "/".into(), name: "nope".into() } };
        assert_eq!(ask(&home, request(2, missing, &[])).await.0, Reply::Refused(Refusal::NotFound));
    }
}
