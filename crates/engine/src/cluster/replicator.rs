//! A replicated quorum queue's home writes the queue's journal through its group: the batches
//! its passes hand over wait here, and one task writes them, one write in flight at a time,
//! everything waiting since the last write in the next (so a slow commit grows the batch, not
//! the number of writes). A write whose answer did not come (no majority, a leader change, a
//! timeout) is sent again unchanged: the members apply a batch once, by its number.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use charon_queue::replica::{ReplicaAnswer, ReplicaCommand};
use charon_queue::{Replicate, Replicated, TakingOver};
use charon_store::segment_log::{MessageLog, Placed, Record};
use parking_lot::Mutex;

use super::ClusterSlot;
use super::replicas::QueueGroup;

/// Bytes waiting for the group beyond which the queue holds its publishers back.
const BEHIND: usize = 32 << 20;
/// The most bytes one write carries (more waits for the next).
const MOST_PER_WRITE: usize = 8 << 20;
/// How long a home that does not lead its queue's group waits before it asks again.
const LEAD_AGAIN: Duration = Duration::from_secs(5);
/// How long a failed write waits before it is sent again.
const RETRY: Duration = Duration::from_millis(250);

/// What waits for the group.
#[derive(Default)]
struct Pending {
    batches: Vec<(Bytes, Replicated)>,
    bytes: usize,
    /// Another node took the queue over: nothing of this home commits any more.
    fenced: bool,
}

/// The home's writer of one queue's journal.
pub(crate) struct Replicator {
    /// Itself, for the writer task it starts.
    me: Weak<Self>,
    cluster: ClusterSlot,
    group: u64,
    /// The queue, as vhost and name.
    queue: (String, String),
    /// Whether this node's metadata was known current when the queue was made here (a declare
    /// or a move it just applied): the take-over then skips the barrier.
    current: bool,
    pending: Mutex<Pending>,
    wake: tokio::sync::Notify,
}

impl Replicator {
    /// The writer for `queue` (vhost and name), of group `group`; `current`: made on a
    /// metadata change this node just applied (not restored at start).
    pub(crate) fn new(cluster: ClusterSlot, group: u64, queue: (String, String), current: bool) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            cluster,
            group,
            queue,
            current,
            pending: Mutex::default(),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// This node's member of group `group`, once the cluster started it and made sure that
    /// this node is the queue's home (`None`: another node is). `current`: this node's
    /// metadata is known current; otherwise a barrier makes it so first.
    async fn member(
        cluster: ClusterSlot,
        group: u64,
        (vhost, name): (String, String),
        current: bool,
    ) -> Option<Arc<QueueGroup>> {
        let me = charon_model::node_name();
        loop {
            // The node restores its queues before it joins its cluster.
            let Some(cluster) = cluster.get() else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let home = match current {
                true => Ok(cluster.queue_record(&vhost, &name).map(|record| record.home)),
                false => cluster.current_home(&vhost, &name).await,
            };
            match home {
                Ok(Some(home)) if home == me => return Some(cluster.replicas().until_started(group).await),
                Ok(home) => {
                    tracing::info!(queue = name, vhost, ?home, "the queue lives on another node now");
                    return None;
                }
                Err(e) => {
                    tracing::debug!(queue = name, vhost, error = %e, "no metadata majority to take the queue over");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Commits `command`, sent again until the group answers it.
    async fn commit(group: &QueueGroup, command: &[u8]) -> ReplicaAnswer {
        loop {
            match group.write(command.to_vec()).await {
                Ok(answer) => return ReplicaAnswer::decode(&answer),
                Err(e) => {
                    tracing::debug!(error = %e, "a queue group did not commit a write; sending it again");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Writes what waits, epoch `epoch`'s batches numbered from 1, until the queue drops its
    /// writer or another home fences it.
    async fn run(me: Weak<Self>, group: Arc<QueueGroup>, epoch: u64) {
        let mut batch = 0;
        let mut asked_to_lead: Option<tokio::time::Instant> = None;
        loop {
            let Some(this) = me.upgrade() else { return };
            // The home leads its queue's group (each write one round to the followers, not a
            // forward first), asked again while another member leads.
            if !group.status().leader && asked_to_lead.is_none_or(|at| at.elapsed() >= LEAD_AGAIN) {
                asked_to_lead = Some(tokio::time::Instant::now());
                if let Err(e) = group.lead().await {
                    tracing::debug!(group = this.group, error = %e, "the home could not lead its queue's group");
                }
            }
            let (records, done) = {
                let mut pending = this.pending.lock();
                let mut size = 0;
                let count = pending.batches.iter().take_while(|(b, _)| {
                    size += b.len();
                    size <= MOST_PER_WRITE || size == b.len()
                });
                let count = count.count();
                let taken: Vec<_> = pending.batches.drain(..count).collect();
                pending.bytes -= taken.iter().map(|(b, _)| b.len()).sum::<usize>();
                taken.into_iter().unzip::<_, _, Vec<Bytes>, Vec<Replicated>>()
            };
            if done.is_empty() {
                // Bounded: the writer notices a dropped queue.
                let _ = tokio::time::timeout(Duration::from_secs(1), this.wake.notified()).await;
                continue;
            }
            batch += 1;
            let command = ReplicaCommand::journal(epoch, batch, &records);
            let answer = Self::commit(&group, &command).await;
            let ok = answer == ReplicaAnswer::Applied;
            if !ok {
                tracing::warn!(group = this.group, ?answer, "the queue's group refused its home's journal");
                let mut pending = this.pending.lock();
                pending.fenced = true;
                let refused = std::mem::take(&mut pending.batches);
                pending.bytes = 0;
                drop(pending);
                refused.into_iter().for_each(|(_, done)| done(false));
            }
            done.into_iter().for_each(|done| done(ok));
            if !ok {
                return;
            }
        }
    }
}

impl Replicate for Replicator {
    fn replicate(&self, records: Bytes, done: Replicated) {
        let mut pending = self.pending.lock();
        if pending.fenced {
            drop(pending);
            done(false);
            return;
        }
        pending.bytes += records.len();
        pending.batches.push((records, done));
        drop(pending);
        self.wake.notify_one();
    }

    fn is_behind(&self) -> bool {
        self.pending.lock().bytes > BEHIND
    }

    fn take_over(&self, queue: u64, log: Arc<MessageLog>) -> TakingOver {
        let (cluster, group, this) = (Arc::clone(&self.cluster), self.group, self.me.clone());
        let (queue_name, current) = (self.queue.clone(), self.current);
        Box::pin(async move {
            let Some(member) = Self::member(cluster, group, queue_name, current).await else {
                return Err("the queue's home is another node".to_owned());
            };
            let take_over = ReplicaCommand::TakeOver { home: charon_model::node_name() }.encode();
            let epoch = match Self::commit(&member, &take_over).await {
                ReplicaAnswer::Home(epoch) => epoch,
                other => return Err(format!("the queue's group answered a take-over with {other:?}")),
            };
            let mut records = vec![Record::DropQueue { queue }];
            records.extend(member.read(|m| m.journal().records(queue)));
            let (placed_tx, placed_rx) = tokio::sync::oneshot::channel::<Result<Vec<Placed>, String>>();
            log.append(
                records,
                Some(Box::new(move |result| {
                    let _ = placed_tx.send(result.map_err(|e| e.to_string()));
                })),
            );
            let placed = placed_rx.await.map_err(|_| "the log stopped".to_owned())??;
            let restored = member.read(|m| m.journal().recovered(&placed));
            tracing::info!(group, epoch, messages = restored.len(), "took the replicated queue over");
            tokio::spawn(Self::run(this, member, epoch));
            Ok(restored)
        })
    }
}
