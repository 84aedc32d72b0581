//! Direct reply-to across nodes: a reply published on one node to a consumer of another is
//! sent there (the consumer's address names its node). Fire-and-forget, as a reply is: a
//! bounded queue per node, drained in batches by one task; what does not fit, or what the node
//! does not take, is dropped, as RabbitMQ drops a reply it cannot deliver.

use std::sync::Arc;
use std::time::Duration;

use charon_cluster::transport::Connection;
use charon_cluster::transport::frame::Kind;
use charon_model::Message;
use tokio::sync::mpsc;

use super::wire::{self, Envelope, Reply, Request};
use crate::cluster::{Cluster, ClusterSlot};

/// Replies waiting for one node.
pub(super) const WAITING: usize = 1024;
/// Most replies one request carries.
const BATCH: usize = 256;
/// How long a request to the consumer's node may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A reply on its way: the address, and the message.
pub(super) type Outgoing = (String, Arc<Message>);

/// The name of the member whose id is `node`.
pub(super) fn member(cluster: &Cluster, node: u64) -> Option<String> {
    cluster.members().into_iter().map(|m| m.name).find(|name| charon_cluster::node_id(name) == node)
}

/// A connection to member `node`, when it is one.
fn connect(cluster: &Cluster, node: u64) -> Option<Connection> {
    let address = cluster.address_of(&member(cluster, node)?)?;
    Some(Connection::new(cluster.queues().identity().clone(), address))
}

fn envelope(cluster: &Cluster, request: Request) -> Envelope {
    let queues = cluster.queues();
    Envelope { from: queues.identity().name.clone(), boot: queues.boot(), request }
}

/// Sends the replies for node `node` as they come, until this node stops.
pub(super) async fn forward(slot: ClusterSlot, node: u64, mut waiting: mpsc::Receiver<Outgoing>) {
    let mut connection: Option<Connection> = None;
    let mut batch = Vec::with_capacity(BATCH);
    while waiting.recv_many(&mut batch, BATCH).await > 0 {
        let Some(cluster) = slot.get() else { return };
        if connection.is_none() {
            connection = connect(cluster, node);
        }
        let (addresses, messages): (Vec<String>, Vec<Arc<Message>>) = batch.drain(..).unzip();
        let Some(link) = connection.as_mut() else { continue };
        let body = wire::encode(&envelope(cluster, Request::Replies { addresses }), &messages);
        match tokio::time::timeout(TIMEOUT, link.call(0, Kind::Queue, body)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "replies for another node dropped"),
            Err(_) => link.reset(),
        }
    }
}

/// Whether the reply consumer at `address` of node `node` is live, as that node says.
pub(super) async fn is_live(cluster: &Cluster, node: u64, address: &str) -> bool {
    let Some(mut link) = connect(cluster, node) else { return false };
    let body = wire::encode(&envelope(cluster, Request::ReplyLive { address: address.to_owned() }), &[]);
    match tokio::time::timeout(TIMEOUT, link.call(0, Kind::Queue, body)).await {
        Ok(Ok(answer)) => matches!(wire::decode::<Reply>(answer), Ok((Reply::Count(1), _))),
        _ => false,
    }
}
