//! A change to the replicated metadata, as a node proposes it.

use serde::{Deserialize, Serialize};

use super::records::{BindingRecord, ExchangeRecord, PolicyRecord, QueueRecord, RedriveRecord};

/// A change to the replicated metadata, as a node proposes it (validated there: applying it
/// only records it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// `PUT /api/cluster-name` (RabbitMQ's `cluster_name` runtime parameter).
    SetClusterName(String),
    /// `PUT /api/vhosts/{name}`: created, or its description and tags replaced.
    PutVhost {
        /// The vhost.
        name: String,
        /// Free text.
        description: String,
        /// Its tags.
        tags: Vec<String>,
    },
    /// `DELETE /api/vhosts/{name}`, with everything in it.
    DeleteVhost {
        /// The vhost.
        name: String,
    },
    /// `PUT /api/users/{name}`: the user's password hash (hashed, salt and all, on the node
    /// that took the request: applying it draws nothing random) and tags.
    PutUser {
        /// The user.
        name: String,
        /// The hashing algorithm's name and the base64 of salt and digest; `None`: no password.
        password: Option<(String, String)>,
        /// Its tags.
        tags: Vec<String>,
    },
    /// `DELETE /api/users/{name}`, with its permissions and limits.
    DeleteUser {
        /// The user.
        name: String,
    },
    /// `DELETE /api/permissions/{vhost}/{user}`.
    ClearPermission {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
    },
    /// A user's permissions in a vhost (`PUT /api/permissions/{vhost}/{user}`, and the
    /// creator's full ones when a vhost is created).
    SetPermission {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The configure pattern.
        configure: String,
        /// The write pattern.
        write: String,
        /// The read pattern.
        read: String,
    },
    /// `PUT /api/topic-permissions/{vhost}/{user}`.
    SetTopicPermission {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The exchange it applies to.
        exchange: String,
        /// The write pattern.
        write: String,
        /// The read pattern.
        read: String,
    },
    /// `DELETE /api/topic-permissions/{vhost}/{user}[?exchange=x]`.
    ClearTopicPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// One exchange's, or (`None`) all of them.
        exchange: Option<String>,
    },
    /// `PUT /api/vhost-limits/...` or `/api/user-limits/...`.
    SetLimit {
        /// `vhost` or `user`.
        scope: String,
        /// The vhost or user.
        name: String,
        /// `max-connections`, `max-queues`, `max-channels`.
        limit: String,
        /// Its value.
        value: i64,
    },
    /// `DELETE /api/vhost-limits/...` or `/api/user-limits/...`.
    ClearLimit {
        /// `vhost` or `user`.
        scope: String,
        /// The vhost or user.
        name: String,
        /// The limit.
        limit: String,
    },
    /// `exchange.declare` (not passive) of an exchange the proposing node did not have.
    DeclareExchange {
        /// The vhost.
        vhost: String,
        /// The exchange.
        name: String,
        /// What was declared.
        record: ExchangeRecord,
    },
    /// `exchange.delete`, with its bindings.
    DeleteExchange {
        /// The vhost.
        vhost: String,
        /// The exchange.
        name: String,
    },
    /// `exchange.bind`.
    BindExchange {
        /// The vhost.
        vhost: String,
        /// The binding.
        binding: BindingRecord,
    },
    /// `exchange.unbind`.
    UnbindExchange {
        /// The vhost.
        vhost: String,
        /// The binding.
        binding: BindingRecord,
    },
    /// `queue.declare` (not passive, not exclusive) of a queue no node had: made on its home
    /// node, a proxy everywhere else.
    DeclareQueue {
        /// The vhost.
        vhost: String,
        /// The queue.
        name: String,
        /// What was declared, and where it lives.
        record: QueueRecord,
    },
    /// `queue.delete` (or the queue deleted itself: auto-delete, `x-expires`), with its
    /// bindings.
    DeleteQueue {
        /// The vhost.
        vhost: String,
        /// The queue.
        name: String,
    },
    /// A replicated quorum queue's home moves to `home`, one of its members (its home node
    /// went: the member leading the queue's group takes it over).
    MoveQueue {
        /// The vhost.
        vhost: String,
        /// The queue.
        name: String,
        /// The new home.
        home: String,
    },
    /// A replicated quorum queue's members become `members` (`add_member`, `delete_member`,
    /// `grow`, `shrink`): a node added starts its member and joins the group; a node removed
    /// stops its own and the home removes it from the group.
    SetReplicaMembers {
        /// The vhost.
        vhost: String,
        /// The queue.
        name: String,
        /// The members, the home among them.
        members: Vec<String>,
    },
    /// Changes nothing: once a node applied it, it has applied everything committed before
    /// (what a new home checks before it takes a queue over).
    Barrier,
    /// `queue.bind` to a queue the cluster recorded.
    BindQueue {
        /// The vhost.
        vhost: String,
        /// The binding (its destination is the queue).
        binding: BindingRecord,
    },
    /// `queue.unbind`.
    UnbindQueue {
        /// The vhost.
        vhost: String,
        /// The binding.
        binding: BindingRecord,
    },
    /// A Zaqar queue's metadata set (its JSON object's text) or (`None`) cleared. The machine
    /// is where a clustered node's Zaqar gateway reads it: no node keeps a copy of its own.
    SetZaqarMetadata {
        /// The Zaqar project (a vhost).
        project: String,
        /// The queue.
        queue: String,
        /// The JSON object, or `None` to forget it.
        metadata: Option<String>,
    },
    /// A policy or operator policy set.
    SetPolicy {
        /// The vhost.
        vhost: String,
        /// Its name.
        name: String,
        /// An operator policy rather than a policy.
        operator: bool,
        /// What was set.
        record: PolicyRecord,
    },
    /// A policy or operator policy cleared.
    ClearPolicy {
        /// The vhost.
        vhost: String,
        /// Its name.
        name: String,
        /// An operator policy rather than a policy.
        operator: bool,
    },
    /// A redrive job created, or its record written again by the node that runs it (its
    /// state, counts and sweep).
    PutRedrive {
        /// The vhost.
        vhost: String,
        /// The job's id.
        id: String,
        /// Its record.
        record: RedriveRecord,
    },
    /// A finished redrive job deleted (its runner forgets it too).
    DeleteRedrive {
        /// The vhost.
        vhost: String,
        /// The job's id.
        id: String,
    },
}
