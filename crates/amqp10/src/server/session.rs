//! Per-connection broker state and dispatch of protocol and engine events.

use std::sync::Arc;
use std::time::Duration;

use foldhash::HashMap as FastMap;
use foldhash::HashMapExt;

use bytes::Bytes;
use charon_engine::login::Peer;
use charon_engine::{
    Broker, Client, ClientError, ConsumerId, Credentials, CreditGrant, EngineError, Owner, QueueRef, SessionEvent,
    SessionId,
};
use fe2o3_amqp_types::definitions::Error;
use fe2o3_amqp_types::performatives::Attach;

use super::address::TargetAddress;
use super::attach::{Attaching, INITIAL_DELIVERY_COUNT};
use super::consume::Sent;
use super::frames::{Arrival, Credit, Disposition};
use super::management::ManagementPairs;
use super::publish::{Incoming, TransferError};
use crate::proto::{Connection, Event, Host, error};

/// What a link is for.
#[derive(Debug)]
pub(crate) enum LinkState {
    /// The client publishes to this target (shared: each transfer takes it while the session
    /// is borrowed mutably, and a clone per message would copy its strings).
    Publisher { target: Arc<TargetAddress> },
    /// The client consumes from this queue.
    Consumer {
        queue: QueueRef,
        consumer: ConsumerId,
        /// Deliveries are sent settled (at most once).
        settled: bool,
        /// The queue was made for this link (a dead-letter event source): it is deleted when
        /// the link goes.
        temporary: bool,
    },
    /// The request half of a management link pair.
    ManagementRequests { pair: String },
    /// The response half of a management link pair.
    ManagementResponses { pair: String },
}

/// A connection's broker state once SASL began: its client, links and consumers, what it
/// sent ([`Sent`]) and what it received ([`Incoming`]), and its management link pairs.
/// Attaches run over a view of what they touch ([`Attaching`]); the driver reads the client
/// (inbox, closing line) and `incoming` (what holds it, deleted queues); the rest is the
/// session's own.
///
/// The per-message maps (links, consumers) hash with foldhash: their keys are the broker's
/// own numbers or handles bounded by `handle-max`, so SipHash's flooding defence buys nothing
/// there and cost about 7 % of the broker's time in S10.
pub(crate) struct Session {
    broker: Arc<Broker>,
    /// Who logged in, the vhost it opened, its connection slot and registration.
    pub(crate) client: Client,
    links: FastMap<(u16, u32), LinkState>,
    consumers: FastMap<ConsumerId, (u16, u32)>,
    /// What was sent on consumer links: unsettled deliveries, settlements to hand over.
    sent: Sent,
    /// What clients publish: routing, batches, outcomes, watched queues.
    pub(crate) incoming: Incoming,
    management: ManagementPairs,
    /// Who connected and when (ms since the epoch), for the registry's details.
    origin: (Peer, i64),
}

/// Checks logins and vhost access during SASL and open.
pub(crate) struct Login<'a> {
    pub(crate) broker: &'a Broker,
    /// Who is logging in (address for the login policy, certificate for EXTERNAL).
    pub(crate) peer: &'a Peer,
    /// Set by a login attempt: how long the driver waits before its answer goes out.
    pub(crate) delay: &'a mut Duration,
    /// Who logged in and what it opened (the engine's, as for every protocol).
    pub(crate) client: &'a mut Client,
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

    /// ANONYMOUS logs in with the configured credentials under the same policy as any login:
    /// RabbitMQ checks `loopback_users` for it too (so, by default, `guest` only from loopback).
    fn anonymous_user(&mut self) -> Option<String> {
        self.login(Credentials::Anonymous)
    }

    fn open_vhost(&mut self, _username: &str, vhost: &str) -> Result<(), String> {
        // A refusal goes to the log only: RabbitMQ 4.0.5 answers a refused open (a connection
        // limit included) with no frame and drops the socket after its silent-close delay.
        match self.client.open_vhost(self.broker, vhost) {
            Ok(()) => Ok(()),
            Err(ClientError::Engine(EngineError::VhostNotFound(_))) => {
                Err(format!("AMQP 1.0 connection failed: virtual host '{vhost}' does not exist"))
            }
            Err(other) => Err(other.to_string()),
        }
    }
}

/// The owner key of a link: queues requeue its unsettled deliveries when it goes.
pub(crate) fn link_owner(session: SessionId, channel: u16, handle: u32) -> Owner {
    Owner { session, channel: (u32::from(channel) << 16) | (handle & 0xffff) }
}

impl Session {
    /// The session of a connection whose client (name, inbox, sink) is `client`, from `peer`
    /// at `connected_at` (ms since the epoch).
    pub(crate) fn new(broker: Arc<Broker>, client: Client, origin: (Peer, i64)) -> Self {
        Self {
            broker,
            incoming: Incoming::new(&client),
            client,
            links: FastMap::new(),
            consumers: FastMap::new(),
            sent: Sent::default(),
            management: ManagementPairs::default(),
            origin,
        }
    }

    /// Folds this connection's counts into the node's (see [`Client::fold_counters`]).
    pub(crate) fn fold_counters(&mut self) {
        self.client.fold_counters(self.consumers.len());
    }

    pub(crate) fn login<'a>(&'a mut self, peer: &'a Peer, delay: &'a mut Duration) -> Login<'a> {
        Login { broker: &self.broker, peer, delay, client: &mut self.client }
    }

    /// Acts on one protocol event.
    pub(crate) async fn handle_event(&mut self, event: Event, conn: &mut Connection) {
        match event {
            // RabbitMQ 4.0.5's line.
            Event::Opened { username, vhost, container_id, mechanism } => {
                tracing::info!(
                    "Connection from AMQP 1.0 container '{container_id}': user '{username}' authenticated using SASL mechanism {mechanism} and granted access to vhost '{vhost}'"
                );
                self.describe(conn);
            }
            Event::SessionBegun(_) => {}
            // The client's close was answered and the socket lingers: nothing is left to do for
            // it but let go of what it held.
            Event::Closed => self.close_all().await,
            Event::SessionEnded(channel) => {
                self.flush(conn, true).await;
                let handles: Vec<u32> = self.links.keys().filter(|(c, _)| *c == channel).map(|(_, h)| *h).collect();
                for handle in handles {
                    self.link_gone(channel, handle).await;
                }
                self.incoming.session_ended(channel);
            }
            Event::Attach { channel, attach } => {
                self.flush(conn, false).await;
                self.on_attach(channel, *attach, conn).await;
            }
            Event::Detached { channel, handle } => {
                self.flush(conn, false).await;
                self.sent.return_link(channel, handle).await;
                self.link_gone(channel, handle).await;
            }
            Event::Credit { channel, handle, delivery_count, link_credit, drain, echo } => {
                self.on_credit(Credit { channel, handle, delivery_count, link_credit, drain, echo }, conn).await;
            }
            Event::Transfer { channel, handle, delivery_id, delivery_tag, settled, payload } => {
                let arrival = Arrival { channel, handle, delivery_id, delivery_tag: &delivery_tag, settled };
                self.on_transfer(arrival, &payload, conn).await;
            }
            Event::Disposition { channel, first, last, last_given, settled, state } => {
                self.flush(conn, false).await;
                let disposition = Disposition { channel, first, last, last_given, settled, state };
                self.sent.on_disposition(disposition, self.client.counters(), conn).await;
            }
        }
    }

    /// An attach: the link it asks for (see [`Attaching`]), or the session ends with the
    /// refusal's condition and RabbitMQ's text.
    async fn on_attach(&mut self, channel: u16, attach: Attach, conn: &mut Connection) {
        let view = Attaching {
            channel,
            broker: &self.broker,
            client: &mut self.client,
            links: &mut self.links,
            consumers: &mut self.consumers,
            management: &mut self.management,
        };
        if let Err(refused) = view.attach(&attach, conn).await {
            Self::end_session(channel, error(refused.condition(), refused.to_string()), conn);
        }
    }

    /// A transfer: a message on a publisher link, or a request to the management node.
    async fn on_transfer(&mut self, arrival: Arrival<'_>, payload: &Bytes, conn: &mut Connection) {
        let (channel, handle) = (arrival.channel, arrival.handle);
        match self.links.get(&(channel, handle)) {
            Some(LinkState::Publisher { target }) => {
                let published = self.incoming.publish((&self.broker, &mut self.client), arrival, target, payload, conn);
                match published {
                    Ok(()) => {}
                    Err(TransferError::EndSession(error)) => Self::end_session(channel, error, conn),
                    Err(TransferError::Detach(error)) => {
                        self.links.remove(&(channel, handle));
                        self.client.publisher_gone();
                        conn.detach(channel, handle, Some(error));
                    }
                }
            }
            Some(LinkState::ManagementRequests { pair }) => {
                let pair = pair.clone();
                self.flush(conn, false).await;
                let client = (&*self.broker, &self.client);
                if let Err(end) = self.management.request(client, &pair, payload, conn).await {
                    Self::end_session(end.channel, error(end.condition, end.description), conn);
                }
            }
            _ => {}
        }
    }

    /// A link went away (detached, its session ended, or the connection closed): consumers
    /// stop and their unsettled deliveries return to the queue, as failed deliveries when the
    /// session or connection went (a quorum queue counts a consumer going down); a detach
    /// returned them as plain returns first ([`Sent::return_link`]).
    pub(crate) async fn link_gone(&mut self, channel: u16, handle: u32) {
        let Some(state) = self.links.remove(&(channel, handle)) else {
            return;
        };
        match state {
            LinkState::Consumer { queue, consumer, temporary, .. } => {
                self.consumers.remove(&consumer);
                self.sent.forget_link(channel, handle);
                queue.cancel(consumer).await;
                queue.owner_closed(link_owner(self.client.id(), channel, handle)).await;
                if let Some(vhost) = self.client.vhost().cloned().filter(|_| temporary) {
                    vhost.drop_queue(&queue).await;
                }
            }
            LinkState::ManagementRequests { pair } | LinkState::ManagementResponses { pair } => {
                self.management.forget(&pair, channel, handle);
            }
            LinkState::Publisher { .. } => self.client.publisher_gone(),
        }
    }

    /// Credit from the client for a link we send on: a consumer's goes to its queue, a
    /// management response link's to its pair.
    async fn on_credit(&mut self, credit: Credit, conn: &mut Connection) {
        self.sent.flush_settles().await;
        match self.links.get(&(credit.channel, credit.handle)) {
            Some(LinkState::Consumer { queue, consumer, .. }) => {
                let grant = CreditGrant {
                    consumer: *consumer,
                    delivery_count: credit.delivery_count.unwrap_or(INITIAL_DELIVERY_COUNT),
                    link_credit: credit.link_credit,
                    drain: credit.drain,
                    echo: credit.echo,
                };
                queue.credit(grant).await;
            }
            Some(LinkState::ManagementResponses { pair }) => self.management.credit(pair, &credit, conn),
            _ => {}
        }
    }

    /// The connection ended.
    pub(crate) async fn close_all(&mut self) {
        self.sent.flush_settles().await;
        let keys: Vec<(u16, u32)> = self.links.keys().copied().collect();
        for (channel, handle) in keys {
            self.link_gone(channel, handle).await;
        }
    }

    /// The queue `name` this session published to by name was deleted: every sending link
    /// whose target is that queue is detached with `amqp:resource-deleted`, as RabbitMQ's
    /// session does on the queue's `eol`.
    pub(crate) fn queue_deleted(&mut self, name: &str, conn: &mut Connection) {
        let targeting: Vec<(u16, u32)> = self
            .links
            .iter()
            .filter(|(_, link)| matches!(link, LinkState::Publisher { target } if matches!(&**target, TargetAddress::Queue(q) if q == name)))
            .map(|(key, _)| *key)
            .collect();
        for (channel, handle) in targeting {
            self.links.remove(&(channel, handle));
            self.client.publisher_gone();
            conn.detach(channel, handle, Some(error_without_description("amqp:resource-deleted")));
        }
    }

    /// Acts on one engine event.
    pub(crate) fn handle_engine_event(&mut self, event: SessionEvent, conn: &mut Connection) {
        match event {
            SessionEvent::Deliveries { consumer, items } => {
                let count = u32::try_from(items.len()).unwrap_or(u32::MAX);
                let link = self.consumers.get(&consumer).copied();
                if let Some(key) = link
                    && let Some(LinkState::Consumer { queue, settled, .. }) = self.links.get(&key)
                {
                    self.sent.deliver(key, (queue, *settled), items, self.client.counters(), conn);
                }
                // Room in the connection's outbound window comes back whatever happened.
                self.client.sink().outbound.release(count);
            }
            SessionEvent::ConsumerCancelled { consumer } => {
                if let Some((channel, handle)) = self.consumers.remove(&consumer) {
                    self.links.remove(&(channel, handle));
                    self.sent.forget_link(channel, handle);
                    conn.detach(channel, handle, Some(error_without_description("amqp:resource-deleted")));
                }
            }
            SessionEvent::CreditState { consumer, delivery_count, credit, available, drain } => {
                if let Some(&(channel, handle)) = self.consumers.get(&consumer) {
                    conn.consumer_flow(channel, handle, delivery_count, credit, drain, available);
                }
            }
            SessionEvent::Confirms { accepted, refused, .. } => {
                self.incoming.confirmed(&accepted, &refused, self.client.counters(), conn);
            }
            // Direct reply-to consumers exist only over 0.9.1 (4.0.5 has none over 1.0), so none
            // is ever addressed here; the window unit it took comes back all the same.
            SessionEvent::Reply { .. } => self.client.sink().outbound.release(1),
            // RabbitMQ 4.0.5 closes with an internal error quoting the reason (observed), not
            // `amqp:connection:forced` as at shutdown.
            // RabbitMQ 4.0.5 shows no state or sessions of a 1.0 connection in the management
            // API (observed): the report says only that it answers.
            SessionEvent::Report(reply) => {
                let _ = reply.send(charon_engine::ConnectionReport { state: "running", channels: Vec::new() });
            }
            SessionEvent::ForceClose { reason } => {
                let description = format!("Connection forced: \"{reason}\"");
                conn.close(Some(error("amqp:internal-error", description)), std::time::Instant::now());
            }
        }
    }

    /// Records the open connection's details in the broker's registry.
    fn describe(&self, conn: &Connection) {
        let (peer, connected_at) = &self.origin;
        let client_properties = conn
            .client_properties()
            .map(|fields| {
                fields
                    .iter()
                    .map(|(key, value)| (key.as_str().to_owned(), crate::codec::value::from_amqp(value)))
                    .collect()
            })
            .unwrap_or_default();
        self.client.describe(
            peer,
            *connected_at,
            charon_engine::Negotiated {
                protocol: "AMQP 1-0",
                auth_mechanism: conn.mechanism().to_owned(),
                client_properties,
                timeout: u32::try_from(conn.idle_timeout_secs()).unwrap_or(u32::MAX),
                frame_max: conn.frame_max(),
                channel_max: u32::from(conn.channel_max()),
            },
        );
    }

    /// Hands what the connection batched to the queues, in the order it was made: first the
    /// settlements of deliveries (so a consumer's accepts reach a queue before the publishes
    /// that follow them), then the publishes (see [`Incoming::flush`]).
    pub(crate) async fn flush(&mut self, conn: &mut Connection, force: bool) {
        self.sent.flush_settles().await;
        self.incoming.flush(force, self.client.counters(), conn).await;
    }

    /// Ends session `channel` with `error`; the core forgets its links.
    fn end_session(channel: u16, error: Error, conn: &mut Connection) {
        tracing::debug!(channel, condition = ?error.condition, description = ?error.description, "ending session");
        conn.end_session(channel, error);
    }
}

/// An error carrying only a condition, as RabbitMQ sends for `resource-deleted`.
pub(crate) fn error_without_description(condition: &str) -> fe2o3_amqp_types::definitions::Error {
    let mut err = error(condition, "");
    err.description = None;
    err
}
