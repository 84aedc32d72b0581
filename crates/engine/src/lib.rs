//! Charon's engine: virtual hosts, exchanges, bindings, queues and consumers.
//!
//! The engine knows no protocol. Adapters (AMQP 0.9.1, AMQP 1.0) translate their methods and
//! performatives into calls on [`VHost`] and [`QueueHandle`], and receive deliveries, consumer
//! cancellations and publish confirmations as [`SessionEvent`]s. Errors carry RabbitMQ's exact
//! texts and a protocol-neutral [`ErrorKind`].
//!
//! # Layout
//! - [`access`]: users, tags, passwords and permissions, and the checks made before acting.
//! - [`broker`]: vhosts, ids; the access registry.
//! - [`client`]: what every protocol's connection keeps of its client: login, the vhost it
//!   opened, its connection slot and registration.
//! - [`connections`]: open connections by user and vhost, closed when either is deleted.
//! - [`listeners`]: the sockets the node listens on, for the management API.
//! - [`queue`] (the `charon-queue` crate, re-exported with its [`dead_letter`], [`session`],
//!   [`gate`], [`clock`], [`connection_info`] and [`error`] modules): one task per queue, its
//!   state, dead lettering, the events queues send to connections, and the errors.
//! - [`persist`]: the message log and the metadata store, committed off the runtime.
//! - [`vhost`]: declare/delete/bind/route; the operations adapters call.
//! - `topology` (private): exchanges, queues and bindings behind the vhost's lock.
//! - [`exchange`]: exchange types and their binding indexes.
//! - [`reply_to`]: direct reply-to, the live `amq.rabbitmq.reply-to` consumers by address.
//! - [`route_cache`]: per-publisher routing cache validated by a topology version.
//! - [`login`]: the login policy (`loopback_users`, the failed-login throttle, SASL EXTERNAL).
//! - [`alarms`], [`limits`]: memory/disk alarms; vhost, user and connection limits.
//! - [`policy`]: RabbitMQ policies and how they apply to queues.
//! - [`metrics`]: counters the Prometheus endpoint renders.
//! - [`redrive`]: redrive jobs, moving dead letters back at a chosen rate.

pub mod access;
pub mod alarms;
pub mod broker;
pub mod client;
pub mod cluster;
pub mod connections;
pub mod exchange;
pub mod limits;
pub mod listeners;
pub mod login;
pub mod metrics;
pub mod persist;
pub mod policy;
pub mod publisher;
pub mod redrive;
pub mod reply_to;
mod reservation;
pub mod route_cache;
mod topology;
pub mod vhost;

/// The queue machine (`charon-queue`), under the name the engine has always given it.
pub use charon_queue as queue;
pub use charon_queue::{clock, connection_info, dead_letter, error, gate, session};

pub use access::{
    Access, AccessError, Account, Action, HashingAlgorithm, PasswordHash, Permission, Principal, Tags, User, VhostInfo,
    WriteGrants,
};
pub use alarms::{Alarms, Resources};
pub use broker::{Broker, BrokerConfig, UserConfig};
pub use client::{Client, ClientError, Credentials, Negotiated};
pub use connection_info::{ChannelReport, ConnectionInfo, ConnectionReport};
pub use connections::{Connections, Listed, Registration};
pub use error::{EngineError, ErrorKind, Inequivalence, Resource, ResourceKind};
pub use exchange::{Binding, Destination, ExchangeInfo, ExchangeKind};
pub use gate::Gate;
pub use limits::{ChannelSlot, ConnectionSlot, LimitScope, Limits};
pub use listeners::{Listener, Listeners};
pub use policy::{ApplyTo, Policy, PolicyFields, PolicyKind};
pub use publisher::{Flush, Publisher};
pub use queue::{
    ConfirmTo, ConsumeSpec, ConsumerReport, ConsumerTimeout, CreditGrant, Enqueue, GetOk, MessageCounters, MovedFrom,
    Overflow, QueueHandle, QueueRef, QueueSettings, QueueStats, QueueType, Settle, SettleSeqs,
};
pub use reply_to::{ReplyConsumer, ReplyConsumers};
pub use route_cache::RouteCache;
pub use session::{ConsumerId, Delivery, Owner, SessionEvent, SessionId, SessionSink};
pub use vhost::{AppliedPolicies, DeclareOk, ExchangeDeclare, QueueDeclare, VHost};
