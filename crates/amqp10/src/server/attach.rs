//! Attaching links: publishers to v2 targets, consumers to `/queues/:queue` (and, a Charon
//! extension, to the dead-letter event exchange), and the `/management` link pair. Refusals follow RabbitMQ 4.0.5: an address that does not exist or
//! cannot be parsed ends the whole session.

use std::sync::Arc;

use fe2o3_amqp_types::definitions::{ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::{Outcome, Released, Source, TargetArchetype};
use fe2o3_amqp_types::performatives::Attach;
use fe2o3_amqp_types::primitives::{Array, Symbol};
use serde_amqp::Value as Amqp;

use charon_engine::dead_letter::events::EVENTS_EXCHANGE;
use charon_engine::{
    Action, Broker, Client, ConsumeSpec, ConsumerId, Destination, EngineError, ErrorKind, Principal, QueueDeclare,
    QueueRef, Resource, ResourceKind, VHost,
};
use charon_model::{Table, erlang};
use foldhash::HashMap as FastMap;

use super::address::{TargetAddress, parse_event_source, parse_source, parse_target, v1_refusal};
use super::attach_error::AttachError;
use super::management::ManagementPairs;
use super::session::{LinkState, link_owner};
use crate::proto::Connection;

/// The management node address.
pub(crate) const MANAGEMENT: &str = "/management";
/// The delivery-count a consumer link starts from (RabbitMQ's `?INITIAL_DELIVERY_COUNT`).
pub(crate) const INITIAL_DELIVERY_COUNT: u32 = u32::MAX - 4;

fn target_address(attach: &Attach) -> Option<Option<String>> {
    match attach.target.as_deref() {
        Some(TargetArchetype::Target(target)) => Some(target.address.clone()),
        None => Some(None),
    }
}

fn source_address(attach: &Attach) -> Option<String> {
    attach.source.as_deref().and_then(|s| s.address.clone())
}

fn is_paired(attach: &Attach) -> bool {
    attach
        .properties
        .as_ref()
        .and_then(|p| p.get(&Symbol::from("paired")))
        .is_some_and(|v| matches!(v, Amqp::Bool(true)))
}

/// A receiver's consumer arguments from its attach properties: `rabbitmq:priority` (an int)
/// is its `x-priority`, as RabbitMQ 4.0.5's `rabbit_amqp_session` reads it.
fn consumer_arguments(attach: &Attach) -> charon_model::Table {
    let mut arguments = charon_model::Table::new();
    let priority = attach.properties.as_ref().and_then(|p| p.get(&Symbol::from("rabbitmq:priority")));
    if let Some(Amqp::Int(priority)) = priority {
        arguments.insert("x-priority", charon_model::Value::I64(i64::from(*priority)));
    }
    arguments
}

/// The Erlang `~tp` rendering RabbitMQ puts in "Attach rejected" texts.
fn erlang_binary_term(tag: &str, address: &str) -> String {
    erlang::tuple(&[tag, &erlang::text(address)])
}

/// An attach on session `channel`, over what it touches: the connection's client (grants,
/// vhost, publisher count), its links and consumers, and its management link pairs.
pub(crate) struct Attaching<'a> {
    pub(crate) channel: u16,
    pub(crate) broker: &'a Broker,
    pub(crate) client: &'a mut Client,
    pub(crate) links: &'a mut FastMap<(u16, u32), LinkState>,
    pub(crate) consumers: &'a mut FastMap<ConsumerId, (u16, u32)>,
    pub(crate) management: &'a mut ManagementPairs,
}

impl Attaching<'_> {
    /// Attaches the link `attach` asks for (the client sends, so we receive, and the other way
    /// round) and answers with our attach; a refusal is the error the session ends with.
    pub(crate) async fn attach(self, attach: &Attach, conn: &mut Connection) -> Result<(), AttachError> {
        match attach.role {
            Role::Sender => self.publisher(attach, conn),
            Role::Receiver => self.consumer(attach, conn).await,
        }
    }

    /// Checks one action of the logged-in user on a queue or exchange of its vhost.
    fn authorize(&self, action: Action, kind: ResourceKind, name: &str) -> Result<(), AttachError> {
        let (Some(user), Some(vhost)) = (self.client.user(), self.client.vhost()) else {
            return Err(AttachError::Internal("not logged in".to_owned()));
        };
        let resource = Resource { kind, vhost: vhost.name().to_owned(), name: name.to_owned() };
        self.broker.access().authorize(user, action, &resource).map_err(AttachError::unauthorized)
    }

    fn publisher(self, attach: &Attach, conn: &mut Connection) -> Result<(), AttachError> {
        let (channel, handle) = (self.channel, attach.handle.0);
        let address = target_address(attach).ok_or(AttachError::Transactions)?;
        let target = match address.as_deref() {
            Some(MANAGEMENT) if attach.snd_settle_mode == SenderSettleMode::Settled => {
                if !is_paired(attach) {
                    return Err(AttachError::InvalidField(
                        "Link property 'paired' is not set to boolean value 'true'".to_owned(),
                    ));
                }
                self.management.attach_requests(&attach.name, channel, handle);
                self.links.insert((channel, handle), LinkState::ManagementRequests { pair: attach.name.clone() });
                let reply = Attach {
                    role: Role::Receiver,
                    snd_settle_mode: SenderSettleMode::Settled,
                    rcv_settle_mode: ReceiverSettleMode::First,
                    max_message_size: Some(conn.max_message_size() as u64),
                    initial_delivery_count: None,
                    unsettled: None,
                    incomplete_unsettled: false,
                    offered_capabilities: None,
                    desired_capabilities: None,
                    ..attach.clone()
                };
                conn.attach(channel, reply);
                conn.grant_initial_credit(channel, handle, attach.initial_delivery_count.unwrap_or(0));
                return Ok(());
            }
            None => TargetAddress::Anonymous,
            Some(text) if text.starts_with("/exchanges/") || text.starts_with("/queues/") => parse_target(text)
                .ok_or_else(|| {
                    let term = erlang_binary_term("bad_address_string", text);
                    AttachError::InvalidField(format!("Attach rejected: {term}"))
                })?,
            Some(text) => {
                return Err(AttachError::InvalidField(format!("Attach rejected: {}", v1_refusal(text, true))));
            }
        };
        self.check_target(&target)?;
        let reply = Attach {
            role: Role::Receiver,
            rcv_settle_mode: ReceiverSettleMode::First,
            max_message_size: Some(conn.max_message_size() as u64),
            initial_delivery_count: None,
            unsettled: None,
            incomplete_unsettled: false,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
            ..attach.clone()
        };
        if self.links.insert((channel, handle), LinkState::Publisher { target: Arc::new(target) }).is_none() {
            self.client.publisher_added();
        }
        conn.attach(channel, reply);
        conn.grant_initial_credit(channel, handle, attach.initial_delivery_count.unwrap_or(0));
        Ok(())
    }

    /// The exchange or queue a publisher link names must exist; an internal exchange is
    /// refused.
    fn check_target(&self, target: &TargetAddress) -> Result<(), AttachError> {
        let Some(vhost) = self.client.vhost() else {
            return Err(AttachError::Internal("no vhost".to_owned()));
        };
        match target {
            TargetAddress::Anonymous => Ok(()),
            // RabbitMQ's `check_exchange/6`: write on the exchange, then the lookup.
            TargetAddress::Exchange { exchange, .. } => match self
                .authorize(Action::Write, ResourceKind::Exchange, exchange)
                .map(|()| vhost.exchange(exchange))?
            {
                None => Err(AttachError::NotFound(format!("no exchange '{exchange}' in vhost '{}'", vhost.name()))),
                Some(info) if info.internal => Err(AttachError::Unauthorized(format!(
                    "forbidden to publish to internal exchange '{exchange}' in vhost '{}'",
                    vhost.name()
                ))),
                Some(_) => Ok(()),
            },
            // The queue must exist, then write on the default exchange it is reached through.
            TargetAddress::Queue(queue) => match vhost.queue(queue, self.client.id()) {
                Err(EngineError::NotFound(_)) => {
                    Err(AttachError::NotFound(format!("no queue '{queue}' in vhost '{}'", vhost.name())))
                }
                _ => self.authorize(Action::Write, ResourceKind::Exchange, ""),
            },
        }
    }

    async fn consumer(self, attach: &Attach, conn: &mut Connection) -> Result<(), AttachError> {
        let (channel, handle) = (self.channel, attach.handle.0);
        let address = source_address(attach);
        if address.as_deref() == Some(MANAGEMENT) {
            if !is_paired(attach) {
                return Err(AttachError::InvalidField(
                    "Link property 'paired' is not set to boolean value 'true'".to_owned(),
                ));
            }
            self.management.attach_responses(&attach.name, channel, handle);
            self.links.insert((channel, handle), LinkState::ManagementResponses { pair: attach.name.clone() });
            let reply = Attach {
                role: Role::Sender,
                snd_settle_mode: SenderSettleMode::Settled,
                initial_delivery_count: Some(INITIAL_DELIVERY_COUNT),
                unsettled: None,
                incomplete_unsettled: false,
                offered_capabilities: None,
                desired_capabilities: None,
                ..attach.clone()
            };
            conn.attach(channel, reply);
            return Ok(());
        }
        let event_key = address.as_deref().and_then(parse_event_source);
        let queue_name = match (address.as_deref(), &event_key) {
            (_, Some(_)) => String::new(),
            (None, None) => {
                return Err(AttachError::InvalidField("Attach rejected: {bad_address,undefined}".to_owned()));
            }
            (Some(text), None) if text.starts_with("/queues/") => parse_source(text).ok_or_else(|| {
                let term = format!("{{bad_address,{{utf8,<<\"{text}\">>}}}}");
                AttachError::InvalidField(format!("Attach rejected: {term}"))
            })?,
            (Some(text), None) => {
                return Err(AttachError::InvalidField(format!("Attach rejected: {}", v1_refusal(text, false))));
            }
        };
        let vhost = self.client.vhost().cloned().ok_or_else(|| AttachError::Internal("no vhost".to_owned()))?;
        // An event source reads from the event exchange (the queue is the broker's, made for
        // this link), checked before the queue is made.
        if let Some(key) = &event_key {
            self.authorize(Action::Read, ResourceKind::Exchange, EVENTS_EXCHANGE)?;
            if let Some(user) = self.client.user() {
                let principal = Principal::new(self.broker.access(), user);
                let checked = principal.check_topic(Action::Read, vhost.name(), EVENTS_EXCHANGE, key);
                checked.map_err(AttachError::unauthorized)?;
            }
        }
        let queue = match &event_key {
            Some(key) => self.event_queue(&vhost, key).await?,
            None => vhost.queue(&queue_name, self.client.id()).map_err(|e| match e.kind() {
                ErrorKind::ResourceLocked => AttachError::ResourceLocked(format!(
                    "cannot obtain exclusive access to locked queue '{queue_name}' in vhost '{}'",
                    vhost.name()
                )),
                _ => AttachError::NotFound(e.to_string()),
            })?,
        };
        // Read on the queue after its lookup, as RabbitMQ's `handle_attach`.
        if event_key.is_none() {
            self.authorize(Action::Read, ResourceKind::Queue, &queue_name)?;
        }
        let temporary = event_key.is_some();
        let settled = attach.snd_settle_mode == SenderSettleMode::Settled;
        let consumer = self.broker.next_id();
        let spec = ConsumeSpec {
            id: consumer,
            // RabbitMQ 4.0.5 tags a 1.0 consumer with its link handle (`"0"`, observed in
            // `/api/consumers`), not the link name.
            tag: handle.to_string(),
            owner: link_owner(self.client.id(), channel, handle),
            session: self.client.sink().clone(),
            no_ack: settled,
            prefetch: 0,
            link_credit: Some(INITIAL_DELIVERY_COUNT),
            channel_limit: None,
            exclusive: false,
            arguments: consumer_arguments(attach),
        };
        if let Err(e) = queue.consume(spec).await {
            if temporary {
                vhost.drop_queue(&queue).await;
            }
            return Err(AttachError::Internal(e.to_string()));
        }
        let mut source: Source = attach.source.as_deref().cloned().unwrap_or_default();
        source.default_outcome = Some(Outcome::Released(Released {}));
        source.outcomes = Some(Array::from(vec![
            Symbol::from("amqp:accepted:list"),
            Symbol::from("amqp:rejected:list"),
            Symbol::from("amqp:released:list"),
            Symbol::from("amqp:modified:list"),
        ]));
        let reply = Attach {
            role: Role::Sender,
            snd_settle_mode: if settled { SenderSettleMode::Settled } else { SenderSettleMode::Unsettled },
            source: Some(Box::new(source)),
            initial_delivery_count: Some(INITIAL_DELIVERY_COUNT),
            unsettled: None,
            incomplete_unsettled: false,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
            ..attach.clone()
        };
        self.links.insert((channel, handle), LinkState::Consumer { queue, consumer, settled, temporary });
        self.consumers.insert(consumer, (channel, handle));
        conn.attach(channel, reply);
        Ok(())
    }

    /// The queue a dead-letter event source link consumes from: server-named, exclusive to
    /// this connection, auto-delete, bound to the event exchange with `key`; the link deletes
    /// it when it goes (docs/dead-letter-events.md).
    async fn event_queue(&self, vhost: &VHost, key: &str) -> Result<QueueRef, AttachError> {
        let refused = AttachError::refused;
        let declare = QueueDeclare { exclusive: true, auto_delete: true, ..QueueDeclare::default() };
        let declared = vhost.declare_queue(&declare, self.client.id()).await.map_err(refused)?;
        let queue = vhost.queue(&declared.name, self.client.id()).map_err(refused)?;
        let destination = Destination::Queue(declared.name);
        if let Err(e) = vhost.bind(EVENTS_EXCHANGE, destination, key, &Table::new(), self.client.id()).await {
            vhost.drop_queue(&queue).await;
            return Err(refused(e));
        }
        Ok(queue)
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::definitions::{Handle, ReceiverSettleMode};
    use serde_amqp::primitives::OrderedMap;

    use super::*;

    fn receiver(properties: Option<OrderedMap<Symbol, Amqp>>) -> Attach {
        Attach {
            name: "r".into(),
            handle: Handle(1),
            role: Role::Receiver,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: None,
            target: None,
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties,
        }
    }

    #[test]
    fn a_receivers_rabbitmq_priority_property_is_its_consumer_priority() {
        let mut properties = OrderedMap::new();
        properties.insert(Symbol::from("rabbitmq:priority"), Amqp::Int(-7));
        let arguments = consumer_arguments(&receiver(Some(properties)));
        assert_eq!(arguments.get("x-priority"), Some(&charon_model::Value::I64(-7)));
        assert!(consumer_arguments(&receiver(None)).is_empty());
        // Only an int counts, as in RabbitMQ 4.0.5's rabbit_amqp_session.
        let mut long = OrderedMap::new();
        long.insert(Symbol::from("rabbitmq:priority"), Amqp::Long(7));
        assert!(consumer_arguments(&receiver(Some(long))).is_empty());
    }
}
