//! Classic queues reached from any node (issue 41, item 4): a queue lives on its home node
//! (the one that declared it); every other node holds a proxy for it ([`proxy`]) that sends
//! its commands there ([`wire`]), where [`Home`] answers them (a publish once the queue
//! confirmed it). What the queue tells a consumer's session on another node (deliveries,
//! cancels, credit) waits on the home node until that session's link, a task on its own node,
//! polls for it: one link per session and home node, for as long as the session is open.

mod home;
mod proxy;
mod replies;
pub(crate) mod wire;

pub use home::Home;
pub(crate) use proxy::spawn as spawn_proxy;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use charon_cluster::transport::frame::Kind;
use charon_cluster::transport::{Connection, Identity};
use parking_lot::Mutex;

use self::wire::{Envelope, Event, Reply, Request};
use super::ClusterSlot;
use crate::gate::{Gate, Waiter};
use crate::session::{Delivery, SessionEvent, SessionId, SessionSink};

/// How long a link waits for a poll's answer (the home node answers within a second).
const POLL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a link waits before it polls a home node that did not answer again.
const RETRY: Duration = Duration::from_secs(1);

/// This node's side of the queues of other nodes: who it is to them, and its sessions'
/// links.
pub struct Queues {
    identity: Identity,
    /// The links running, by home node and session.
    links: Mutex<HashSet<(String, SessionId)>>,
    /// Direct replies on their way to the node of their consumer, by node id.
    replies: Mutex<HashMap<u64, tokio::sync::mpsc::Sender<replies::Outgoing>>>,
}

impl Queues {
    /// This node's side, as `identity` to its peers.
    #[must_use]
    pub fn new(identity: Identity) -> Self {
        Self { identity, links: Mutex::default(), replies: Mutex::default() }
    }

    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// This run of the node: the home nodes tell its sessions from an earlier run's.
    pub(crate) fn boot(&self) -> u64 {
        super::boot()
    }

    /// Starts the link of `session` to `home` unless it runs.
    pub(crate) fn link(&self, cluster: &ClusterSlot, home: &str, session: &SessionSink) {
        if !self.links.lock().insert((home.to_owned(), session.id)) {
            return;
        }
        let link = Link {
            cluster: Arc::clone(cluster),
            home: home.to_owned(),
            session: session.clone(),
            wake: Arc::new(Wake::default()),
        };
        tokio::spawn(link.run());
    }

    /// Sends a direct reply to the consumer at `address` on node `node` (dropped when that
    /// node's replies already wait in full, or when no member is that node: an address is a
    /// client's bytes, and a forged node must not get a queue and a task of its own).
    pub(crate) fn forward_reply(
        &self,
        cluster: &ClusterSlot,
        node: u64,
        address: &str,
        message: &Arc<charon_model::Message>,
    ) {
        let mut replies = self.replies.lock();
        if !replies.contains_key(&node) && cluster.get().and_then(|c| replies::member(c, node)).is_none() {
            return;
        }
        let waiting = replies.entry(node).or_insert_with(|| {
            let (sender, waiting) = tokio::sync::mpsc::channel(replies::WAITING);
            tokio::spawn(replies::forward(Arc::clone(cluster), node, waiting));
            sender
        });
        let _ = waiting.try_send((address.to_owned(), Arc::clone(message)));
    }

    /// Whether the direct reply-to consumer at `address` on node `node` is live.
    pub(crate) async fn reply_is_live(&self, cluster: &super::Cluster, node: u64, address: &str) -> bool {
        replies::is_live(cluster, node, address).await
    }

    fn unlink(&self, home: &str, session: SessionId) {
        self.links.lock().remove(&(home.to_owned(), session));
    }
}

/// Wakes a link waiting for room in its session's outbound window.
#[derive(Debug, Default)]
struct Wake(tokio::sync::Notify);

impl Waiter for Wake {
    fn resume(&self) {
        self.0.notify_one();
    }
}

/// A session's link to one home node: polls what that node's queues told the session and
/// hands it to the session, until the session closes (then the home node is told, and its
/// queues take back what the session had not settled).
struct Link {
    cluster: ClusterSlot,
    home: String,
    session: SessionSink,
    wake: Arc<Wake>,
}

impl Link {
    async fn run(self) {
        let mut connection: Option<Connection> = None;
        while !self.session.is_closed() {
            let Some(cluster) = self.cluster.get() else { break };
            let queues = cluster.queues();
            if connection.is_none() {
                connection = cluster.address_of(&self.home).map(|a| Connection::new(queues.identity().clone(), a));
            }
            let Some(link) = connection.as_mut() else {
                tokio::time::sleep(RETRY).await;
                continue;
            };
            let request = Request::Poll { session: self.session.id };
            let envelope = Envelope { from: queues.identity().name.clone(), boot: queues.boot(), request };
            let body = wire::encode(&envelope, &[]);
            let answer = tokio::time::timeout(POLL_TIMEOUT, link.call(0, Kind::Queue, body)).await;
            match answer.map(|a| a.map(wire::decode::<Reply>)) {
                Ok(Ok(Ok((Reply::Events(events), messages)))) => self.hand_over(events, messages).await,
                other => {
                    if other.is_err() {
                        link.reset();
                    }
                    tracing::debug!(home = self.home, "a session's link to its queues' node got no events");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
        let Some(cluster) = self.cluster.get() else { return };
        let queues = cluster.queues();
        if let Some(mut link) = connection {
            let request = Request::Close { session: self.session.id };
            let envelope = Envelope { from: queues.identity().name.clone(), boot: queues.boot(), request };
            let _ = tokio::time::timeout(POLL_TIMEOUT, link.call(0, Kind::Queue, wire::encode(&envelope, &[]))).await;
        }
        queues.unlink(&self.home, self.session.id);
    }

    /// Gives the session what its queues told it, deliveries as its outbound window has room
    /// for them (the connection gives the units back as it writes them): a batch larger than
    /// the window goes in parts, each once the part before made room.
    async fn hand_over(&self, events: Vec<Event>, messages: Vec<charon_model::Message>) {
        let mut messages = messages.into_iter();
        for event in events {
            let event = match event {
                Event::Deliveries { consumer, items } => {
                    let mut items: Vec<Delivery> = items
                        .into_iter()
                        .zip(messages.by_ref())
                        .map(|(d, message)| Delivery {
                            seq: d.seq,
                            message: Arc::new(message),
                            redelivered: d.redelivered,
                            delivery_count: d.delivery_count,
                        })
                        .collect();
                    while !items.is_empty() && !self.session.is_closed() {
                        let room = self.room(u32::try_from(items.len()).unwrap_or(u32::MAX)).await;
                        let rest = items.split_off(usize::try_from(room).unwrap_or(usize::MAX).min(items.len()));
                        self.session.send(SessionEvent::Deliveries { consumer, items });
                        items = rest;
                    }
                    continue;
                }
                Event::Cancelled { consumer } => SessionEvent::ConsumerCancelled { consumer },
                Event::CreditState { consumer, delivery_count, credit, available, drain } => {
                    SessionEvent::CreditState { consumer, delivery_count, credit, available, drain }
                }
                Event::ForceClose { reason } => SessionEvent::ForceClose { reason },
            };
            self.session.send(event);
        }
    }

    /// Takes up to `wanted` units of the session's outbound window, at least one, waiting for
    /// room; how many it took (none once the session closed).
    async fn room(&self, wanted: u32) -> u32 {
        let gate: &Gate = &self.session.outbound;
        while !self.session.is_closed() {
            let taken = gate.try_acquire_up_to(wanted, 1);
            if taken > 0 {
                return taken;
            }
            if gate.acquire_or_wait(&self.wake) {
                return if wanted > 1 { 1 + gate.try_acquire_up_to(wanted - 1, 1) } else { 1 };
            }
            let _ = tokio::time::timeout(RETRY, self.wake.0.notified()).await;
        }
        0
    }
}
