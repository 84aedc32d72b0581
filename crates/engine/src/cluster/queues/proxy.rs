//! A queue of another node, as this node holds it: a [`QueueHandle`] whose mailbox a task
//! drains, sending each command to the queue's home node (publishes batched per drain of the
//! mailbox, each answered with its confirms). Routing, the channels and the management API use
//! it as any queue; what its queue tells this node's consumers comes through their sessions'
//! links (`super::Queues::link`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use charon_cluster::transport::Connection;
use charon_cluster::transport::frame::Kind;
use tokio::sync::mpsc;

use super::wire::{self, Envelope, QueueName, Reply, Request, Run};
use crate::cluster::ClusterSlot;
use crate::cluster::metadata::EncodedTable;
use crate::error::{EngineError, Resource};
use crate::queue::command::QueueCmd;
use crate::queue::{ConfirmTo, Enqueue, GetOk, QueueConfig, QueueHandle, QueueRef, QueueStats};
use crate::session::{ConsumerId, Delivery, SessionEvent, SessionId};

/// The proxy's mailbox: as a queue's, it holds publishers back when full.
const MAILBOX: usize = 256;
/// Most messages one publish request carries.
const BATCH: usize = 512;
/// How long a request may take: a node cut off answers nothing.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a publish may take: it waits while the queue holds its publishers back.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a proxy whose home node did not answer asks it again.
const PROBE: Duration = Duration::from_secs(1);

/// Starts the proxy of queue `config`, which lives on node `home`; `back` runs when the home
/// node answers again after it did not (the vhost's dead letters waiting for it go then).
pub(crate) fn spawn(
    cluster: ClusterSlot,
    id: u64,
    config: QueueConfig,
    home: String,
    back: Box<dyn Fn() + Send>,
) -> QueueRef {
    let (queue, mailbox) = QueueHandle::proxy(id, config, home.clone(), MAILBOX);
    let retired = queue.retired.subscribe();
    let name = QueueName { vhost: queue.config.vhost.clone(), name: queue.config.name.clone() };
    let resource = queue.resource();
    let proxy = Proxy {
        cluster,
        home,
        resource,
        name,
        connection: None,
        consumers: HashMap::new(),
        failed: false,
        held: None,
        back,
        retired,
    };
    tokio::spawn(proxy.run(mailbox));
    queue
}

struct Proxy {
    cluster: ClusterSlot,
    home: String,
    resource: Resource,
    name: QueueName,
    connection: Option<Connection>,
    /// This node's consumers of the queue, by id, with their sessions.
    consumers: HashMap<ConsumerId, (SessionId, u32)>,
    /// The last request went unanswered: the home node is asked again every [`PROBE`].
    failed: bool,
    /// Dead letters the home node did not take, sent again (and nothing else done) until it
    /// does: their source keeps them until they are confirmed, and a refusal would be taken as
    /// final. Holding them holds the mailbox, and with it the source's outbox: bounded.
    held: Option<Batch>,
    back: Box<dyn Fn() + Send>,
    /// Set once the handle no longer stands for the queue (it moved): a request under way gives
    /// up at once (its publishers are refused and publish again, to where it is now).
    retired: tokio::sync::watch::Receiver<bool>,
}

/// Publishes drained from the mailbox in one go.
type Batch = Vec<(Vec<Enqueue>, Option<ConfirmTo>)>;

impl Proxy {
    async fn run(mut self, mut mailbox: mpsc::Receiver<QueueCmd>) {
        let mut next = self.next(&mut mailbox).await;
        while let Some(command) = next.take() {
            match command {
                QueueCmd::Publish { items, confirm_to } => {
                    let mut batch = vec![(items, confirm_to)];
                    let mut count = batch.iter().map(|(items, _)| items.len()).sum::<usize>();
                    while count < BATCH {
                        match mailbox.try_recv() {
                            Ok(QueueCmd::Publish { items, confirm_to }) => {
                                count += items.len();
                                batch.push((items, confirm_to));
                            }
                            Ok(other) => {
                                next = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.publish(batch).await;
                }
                other => self.handle(other).await,
            }
            if next.is_none() {
                next = self.next(&mut mailbox).await;
            }
        }
    }

    /// The next command; meanwhile, a home node that did not answer is asked again.
    async fn next(&mut self, mailbox: &mut mpsc::Receiver<QueueCmd>) -> Option<QueueCmd> {
        while self.failed {
            if let Some(held) = self.held.take() {
                tokio::time::sleep(PROBE).await;
                self.publish(held).await;
                continue;
            }
            tokio::select! {
                command = mailbox.recv() => return command,
                () = tokio::time::sleep(PROBE) => {
                    let _ = self.stats(self.name.clone(), false).await;
                }
            }
        }
        mailbox.recv().await
    }

    /// Sends `request`, waiting at most `timeout` for the answer.
    async fn call(
        &mut self,
        request: Request,
        messages: &[Arc<charon_model::Message>],
        timeout: Duration,
    ) -> Result<(Reply, Vec<charon_model::Message>), EngineError> {
        let answered = self.exchange(request, messages, timeout).await;
        match &answered {
            Err(EngineError::HomeNodeDown { .. }) => self.failed = true,
            _ if std::mem::take(&mut self.failed) => {
                tracing::info!(home = self.home, queue = %self.resource, "the queue's node answers again");
                (self.back)();
            }
            _ => {}
        }
        answered
    }

    /// [`Self::call`]'s request and answer: the home node unknown, unreachable, silent or
    /// garbled is [`EngineError::HomeNodeDown`].
    async fn exchange(
        &mut self,
        request: Request,
        messages: &[Arc<charon_model::Message>],
        timeout: Duration,
    ) -> Result<(Reply, Vec<charon_model::Message>), EngineError> {
        let down = || EngineError::HomeNodeDown { node: self.home.clone(), queue: self.resource.clone() };
        let Some(cluster) = self.cluster.get() else {
            return Err(down());
        };
        let queues = cluster.queues();
        if self.connection.is_none() {
            let Some(address) = cluster.address_of(&self.home) else {
                return Err(down());
            };
            self.connection = Some(Connection::new(queues.identity().clone(), address));
        }
        let Some(connection) = self.connection.as_mut() else {
            return Err(down());
        };
        let envelope = Envelope { from: queues.identity().name.clone(), boot: queues.boot(), request };
        let body = wire::encode(&envelope, messages);
        let call = tokio::time::timeout(timeout, connection.call(0, Kind::Queue, body));
        let mut retired = self.retired.clone();
        let answered = tokio::select! {
            answered = call => answered,
            _ = retired.wait_for(|retired| *retired) => {
                connection.reset();
                return Err(down());
            }
        };
        let answer = match answered {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                tracing::debug!(home = self.home, error = %e, "queue request failed");
                return Err(down());
            }
            Err(_) => {
                connection.reset();
                return Err(down());
            }
        };
        match wire::decode::<Reply>(answer) {
            Ok((Reply::Refused(refusal), _)) => Err(refusal.error(self.resource.clone())),
            Ok(answered) => Ok(answered),
            Err(e) => {
                tracing::warn!(home = self.home, error = %e, "a queue answer that does not decode");
                connection.reset();
                Err(down())
            }
        }
    }

    /// Sends a batch of publishes and hands their confirms to their publishers once the home
    /// node answered with them; what it did not answer for is refused to the publishers that
    /// asked for confirms (they publish again: nothing confirmed is lost, even with a home node
    /// that crashed before it confirmed), except dead letters, which are held and sent again.
    async fn publish(&mut self, batch: Batch) {
        let mut messages = Vec::new();
        let runs = batch
            .iter()
            .map(|(items, confirm_to)| {
                messages.extend(items.iter().map(|item| Arc::clone(&item.message)));
                Run { confirm: confirm_to.is_some(), numbers: items.iter().map(|item| item.confirm).collect() }
            })
            .collect();
        let request = Request::Publish { queue: self.name.clone(), runs };
        match self.call(request, &messages, PUBLISH_TIMEOUT).await {
            Ok((Reply::Published(outcomes), _)) => {
                for ((_, confirm_to), outcome) in batch.iter().zip(outcomes) {
                    if let Some(to) = confirm_to
                        && !(outcome.accepted.is_empty() && outcome.refused.is_empty())
                    {
                        let (accepted, refused) = (outcome.accepted, outcome.refused);
                        to.session.send(SessionEvent::Confirms { channel: to.channel, accepted, refused });
                    }
                }
            }
            answered => {
                if let Err(e) = answered {
                    tracing::debug!(queue = %self.resource, error = %e, "publishes not taken");
                }
                let dead_letter = |(items, to): &(Vec<Enqueue>, Option<ConfirmTo>)| {
                    to.is_some() && items.iter().any(|item| item.message.broker.deaths.is_some())
                };
                let (letters, others): (Batch, Batch) = batch.into_iter().partition(dead_letter);
                for (items, confirm_to) in others {
                    refuse(&items, confirm_to.as_ref());
                }
                if !letters.is_empty() && self.failed {
                    self.held = Some(letters);
                } else {
                    for (items, confirm_to) in letters {
                        refuse(&items, confirm_to.as_ref());
                    }
                }
            }
        }
    }

    /// Makes sure the session's link to the home node runs (its deliveries come through it).
    fn link(&self, session: &crate::session::SessionSink) {
        if let Some(cluster) = self.cluster.get() {
            cluster.queues().link(&self.cluster, &self.home, session);
        }
    }

    async fn handle(&mut self, command: QueueCmd) {
        let queue = self.name.clone();
        match command {
            QueueCmd::Publish { .. } => {}
            QueueCmd::PublishNumbered { items, confirm_to, numbers } => {
                // Zaqar's numbered publishes stay with the queue's own node.
                drop(numbers);
                refuse(&items, Some(&confirm_to));
            }
            QueueCmd::PublishMoved { items, confirm_to, .. } => refuse(&items, Some(&confirm_to)),
            QueueCmd::Consume(spec, reply) => {
                self.link(&spec.session);
                let request = Request::Consume {
                    queue,
                    session: spec.owner.session,
                    consumer: spec.id,
                    tag: spec.tag.clone(),
                    channel: spec.owner.channel,
                    no_ack: spec.no_ack,
                    prefetch: spec.prefetch,
                    link_credit: spec.link_credit,
                    exclusive: spec.exclusive,
                    arguments: EncodedTable::new(&spec.arguments),
                };
                let answered = self.call(request, &[], REQUEST_TIMEOUT).await.map(drop);
                if answered.is_ok() {
                    self.consumers.insert(spec.id, (spec.owner.session, spec.owner.channel));
                }
                let _ = reply.send(answered);
            }
            QueueCmd::Cancel(consumer, reply) => {
                let found = match self.consumers.remove(&consumer) {
                    Some((session, _)) => {
                        let request = Request::Cancel { queue, session, consumer };
                        matches!(self.call(request, &[], REQUEST_TIMEOUT).await, Ok((Reply::Count(1), _)))
                    }
                    None => false,
                };
                let _ = reply.send(found);
            }
            QueueCmd::Settle { seqs, how } => {
                let request = Request::Settle { queue, seqs: seqs.to_vec(), how: how.into() };
                self.tell(request).await;
            }
            QueueCmd::SettleModified { seqs, failed, annotations } => {
                let annotations = EncodedTable::new(&annotations);
                self.tell(Request::SettleModified { queue, seqs, failed, annotations }).await;
            }
            // What the consumer said goes with the local settle only; the queue's node
            // records the settle.
            QueueCmd::SettleRefused { seqs, how, .. } => {
                self.tell(Request::Settle { queue, seqs, how: how.into() }).await;
            }
            QueueCmd::Get { owner, no_ack, reply } => {
                let request = Request::Get { queue, session: owner.session, channel: owner.channel, no_ack };
                match self.call(request, &[], REQUEST_TIMEOUT).await {
                    Ok((Reply::Got(Some((facts, remaining))), mut messages)) if messages.len() == 1 => {
                        let message = Arc::new(messages.remove(0));
                        let delivery = Delivery {
                            seq: facts.seq,
                            message,
                            redelivered: facts.redelivered,
                            delivery_count: facts.delivery_count,
                        };
                        let _ = reply.send(Some(GetOk { delivery, remaining }));
                    }
                    Ok((Reply::Got(None), _)) => {
                        let _ = reply.send(None);
                    }
                    // Dropped: the caller answers that the queue's node is down.
                    _ => drop(reply),
                }
            }
            QueueCmd::Purge(reply) => {
                if let Ok((Reply::Count(purged), _)) = self.call(Request::Purge { queue }, &[], REQUEST_TIMEOUT).await {
                    let _ = reply.send(purged);
                }
            }
            QueueCmd::Stats(reply) => {
                if let Some(stats) = self.stats(queue, false).await {
                    let _ = reply.send(stats);
                }
            }
            QueueCmd::Declared(reply) => {
                if let Some(stats) = self.stats(queue, true).await {
                    let _ = reply.send(stats);
                }
            }
            QueueCmd::OwnerClosed(owner) => {
                self.consumers.retain(|_, at| *at != (owner.session, owner.channel));
                self.tell(Request::OwnerClosed { queue, session: owner.session, channel: owner.channel }).await;
            }
            QueueCmd::Credit(grant) => {
                let Some(&(session, _)) = self.consumers.get(&grant.consumer) else { return };
                let request = Request::Credit {
                    queue,
                    session,
                    consumer: grant.consumer,
                    delivery_count: grant.delivery_count,
                    link_credit: grant.link_credit,
                    drain: grant.drain,
                    echo: grant.echo,
                };
                self.tell(request).await;
            }
            // The queue's node is the one that deletes it, when the cluster deleted it.
            QueueCmd::Delete { reply, .. } => {
                let _ = reply.send(Ok(0));
            }
            // Nothing held here.
            QueueCmd::Flush(reply) => {
                let _ = reply.send(true);
            }
            // The queue's node applies its policies, and its dead letters are its own; the
            // dead-letter browser reads queues of the node it runs on.
            QueueCmd::Settings(_)
            | QueueCmd::Resume
            | QueueCmd::TopologyChanged
            | QueueCmd::Browse { .. }
            | QueueCmd::Remove { .. }
            | QueueCmd::RemoveChecked { .. }
            | QueueCmd::Consumers(_) => {}
        }
    }

    /// Sends a request nobody waits for; a failure is logged (what it settled or closed goes
    /// back to the queue when the home node closes this node's sessions).
    async fn tell(&mut self, request: Request) {
        if let Err(e) = self.call(request, &[], REQUEST_TIMEOUT).await {
            tracing::debug!(queue = %self.resource, error = %e, "queue request not taken");
        }
    }

    async fn stats(&mut self, queue: QueueName, declared: bool) -> Option<QueueStats> {
        match self.call(Request::Stats { queue, declared }, &[], REQUEST_TIMEOUT).await {
            Ok((Reply::Stats(counters), _)) => Some(counters.into()),
            _ => None,
        }
    }
}

/// Refuses the confirms of `items` to their publisher.
fn refuse(items: &[Enqueue], confirm_to: Option<&ConfirmTo>) {
    let Some(to) = confirm_to else { return };
    let refused: Vec<u64> = items.iter().filter_map(|item| item.confirm).collect();
    if !refused.is_empty() {
        to.session.send(SessionEvent::Confirms { channel: to.channel, accepted: Vec::new(), refused });
    }
}
