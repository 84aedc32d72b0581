//! What every member of a replicated quorum queue keeps: the queue's journal, applied in the
//! order its Raft group committed it.
//!
//! The queue's home node runs the queue ([`crate::spawn`]): its deterministic
//! `QueueState` decides every delivery, expiry and dead letter, and writes what a restart must
//! find as log records (its journal, see `journal.rs`). A replicated queue sends the same
//! records through its group; each member applies them here, so that a member that becomes
//! the home restores the queue from its copy exactly as a restart restores it from the log.
//! Members replicate the home's decisions rather than its inputs (rabbit_fifo replicates the
//! inputs): the queue's dispatch waits on connection gates and on reads of paged messages,
//! whose timing no two nodes share, while its records are already the deterministic account of
//! what happened — the same batches in the same order give every member the same state, which
//! is all this type holds (no clock, no randomness, ordered maps only).
//!
//! Two writers must never interleave. The home that writes is named in the state: a node that
//! becomes the home first commits [`ReplicaCommand::TakeOver`], which starts a new epoch, and
//! a batch written under an earlier epoch is refused ([`ReplicaAnswer::Fenced`]) — a home cut
//! off in a minority and healed cannot add to the queue behind its successor's back. Within an
//! epoch batches are numbered: a batch sent again after its answer was lost (a leader change,
//! a timeout) is applied once.

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};
use charon_store::segment_log::{Placed, Record, RecoveredMessage, RecoveredQueue, decode_batch, encode_batch};

/// The longest home name a command or snapshot may carry (node names are short).
const MAX_HOME: usize = 1024;

/// A command for a replicated queue's group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaCommand {
    /// Batch `batch` of epoch `epoch`'s journal: records as [`encode_batch`] frames them.
    Journal {
        /// The epoch of the home that wrote them.
        epoch: u64,
        /// Counts the epoch's batches from 1: one at or below the last applied was applied.
        batch: u64,
        /// The records.
        records: Bytes,
    },
    /// `home` becomes the queue's home, in a new epoch.
    TakeOver {
        /// Its node name.
        home: String,
    },
}

/// What a member answers a [`ReplicaCommand`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaAnswer {
    /// The batch is applied (or was, when it came again).
    Applied,
    /// The batch's epoch is over: another home took over (the current epoch).
    Fenced(u64),
    /// The take-over is applied: the new epoch.
    Home(u64),
    /// The command did not decode (a peer's bytes): nothing applied.
    Refused,
}

/// One message as the members keep it: its enqueue record's fields and its marks.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Kept {
    expires_at: Option<i64>,
    size: u32,
    priority: u8,
    not_before: Option<i64>,
    payload: Bytes,
    delivered: bool,
    returned: u32,
    failed: u32,
    dead_lettered: Option<u8>,
}

/// A replicated queue's journal as one member applied it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaJournal {
    /// Counts take-overs; a batch of another epoch is refused.
    epoch: u64,
    /// The node that writes in this epoch.
    home: String,
    /// The last batch of this epoch applied.
    batch: u64,
    /// The queue's messages by sequence number.
    messages: BTreeMap<u64, Kept>,
}

impl ReplicaCommand {
    /// The command's bytes, for the group's log.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Journal { epoch, batch, records } => Self::journal(*epoch, *batch, std::slice::from_ref(records)),
            Self::TakeOver { home } => {
                let mut out = Vec::with_capacity(1 + home.len());
                out.push(2);
                out.extend_from_slice(home.as_bytes());
                out
            }
        }
    }

    /// A [`Self::Journal`] command's bytes straight from the passes' batches (`parts`, each
    /// framed by [`encode_batch`]), copied once: what the home's writer sends.
    #[must_use]
    pub fn journal(epoch: u64, batch: u64, parts: &[Bytes]) -> Vec<u8> {
        let mut out = Vec::with_capacity(17 + parts.iter().map(Bytes::len).sum::<usize>());
        out.push(1);
        out.extend_from_slice(&epoch.to_le_bytes());
        out.extend_from_slice(&batch.to_le_bytes());
        for part in parts {
            out.extend_from_slice(part);
        }
        out
    }

    /// A command from its bytes (a peer's: `None` when they are no command).
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut bytes = Bytes::copy_from_slice(bytes);
        match bytes.try_get_u8().ok()? {
            1 => {
                let epoch = bytes.try_get_u64_le().ok()?;
                let batch = bytes.try_get_u64_le().ok()?;
                Some(Self::Journal { epoch, batch, records: bytes })
            }
            2 if bytes.len() <= MAX_HOME => Some(Self::TakeOver { home: String::from_utf8(bytes.to_vec()).ok()? }),
            _ => None,
        }
    }
}

impl ReplicaAnswer {
    /// The answer's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9);
        match self {
            Self::Applied => out.push(1),
            Self::Fenced(epoch) => {
                out.push(2);
                out.extend_from_slice(&epoch.to_le_bytes());
            }
            Self::Home(epoch) => {
                out.push(3);
                out.extend_from_slice(&epoch.to_le_bytes());
            }
            Self::Refused => out.push(4),
        }
        out
    }

    /// An answer from its bytes (`Refused` when they are none).
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Self {
        let mut bytes = bytes;
        match (bytes.try_get_u8(), bytes.try_get_u64_le()) {
            (Ok(1), _) => Self::Applied,
            (Ok(2), Ok(epoch)) => Self::Fenced(epoch),
            (Ok(3), Ok(epoch)) => Self::Home(epoch),
            _ => Self::Refused,
        }
    }
}

impl ReplicaJournal {
    /// The current epoch.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The node that writes in the current epoch (empty before the first take-over).
    #[must_use]
    pub fn home(&self) -> &str {
        &self.home
    }

    /// How many messages the queue holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Applies a command's bytes (a committed log entry) and answers it.
    pub fn apply(&mut self, command: &[u8]) -> ReplicaAnswer {
        match ReplicaCommand::decode(command) {
            Some(ReplicaCommand::TakeOver { home }) => {
                self.epoch += 1;
                self.home = home;
                self.batch = 0;
                ReplicaAnswer::Home(self.epoch)
            }
            Some(ReplicaCommand::Journal { epoch, .. }) if epoch != self.epoch => ReplicaAnswer::Fenced(self.epoch),
            Some(ReplicaCommand::Journal { batch, .. }) if batch <= self.batch => ReplicaAnswer::Applied,
            Some(ReplicaCommand::Journal { batch, records, .. }) => match decode_batch(&records) {
                Ok(records) => {
                    self.batch = batch;
                    for record in records {
                        self.apply_record(record);
                    }
                    ReplicaAnswer::Applied
                }
                Err(_) => ReplicaAnswer::Refused,
            },
            None => ReplicaAnswer::Refused,
        }
    }

    /// One record, as a restart's replay applies it to one queue. Spills and their releases
    /// are a transient message's (or a parked dead letter's) way out of memory: nothing a
    /// restart recovers. A moved message's source (`replaces`) is another queue's business.
    fn apply_record(&mut self, record: Record) {
        match record {
            Record::Enqueue { seq, expires_at, size, priority, not_before, payload, .. } => {
                let kept = Kept {
                    expires_at,
                    size,
                    priority,
                    not_before,
                    payload,
                    delivered: false,
                    returned: 0,
                    failed: 0,
                    dead_lettered: None,
                };
                self.messages.insert(seq, kept);
            }
            Record::Remove { seq, .. } => {
                self.messages.remove(&seq);
            }
            Record::Delivered { seq, returned, failed, .. } => {
                if let Some(kept) = self.messages.get_mut(&seq) {
                    kept.delivered = true;
                    kept.returned = returned;
                    kept.failed = failed;
                }
            }
            Record::DeadLettered { seq, reason, .. } => {
                if let Some(kept) = self.messages.get_mut(&seq) {
                    kept.dead_lettered = Some(reason);
                }
            }
            Record::DropQueue { .. } => self.messages.clear(),
            Record::Spill { .. } | Record::Released { .. } => {}
        }
    }

    /// The records that make the queue's messages again, as queue `queue`'s: its enqueues,
    /// each followed by its marks. What a new home writes to its own log before it restores
    /// the queue, and what a snapshot holds.
    #[must_use]
    pub fn records(&self, queue: u64) -> Vec<Record> {
        let mut records = Vec::with_capacity(self.messages.len());
        for (seq, kept) in &self.messages {
            let seq = *seq;
            records.push(Record::Enqueue {
                queue,
                seq,
                expires_at: kept.expires_at,
                size: kept.size,
                priority: kept.priority,
                not_before: kept.not_before,
                replaces: None,
                payload: kept.payload.clone(),
            });
            if kept.delivered {
                records.push(Record::Delivered { queue, seq, returned: kept.returned, failed: kept.failed });
            }
            if let Some(reason) = kept.dead_lettered {
                records.push(Record::DeadLettered { queue, seq, reason });
            }
        }
        records
    }

    /// The queue's messages for its restore, at the places where [`Self::records`] were
    /// written (a message with no place, which the log did not write, is left out).
    #[must_use]
    pub fn recovered(&self, placed: &[Placed]) -> RecoveredQueue {
        let places: BTreeMap<u64, _> = placed.iter().map(|p| (p.seq, p.place)).collect();
        let messages = self
            .messages
            .iter()
            .filter_map(|(seq, kept)| {
                Some(RecoveredMessage {
                    seq: *seq,
                    expires_at: kept.expires_at,
                    size: kept.size,
                    priority: kept.priority,
                    not_before: kept.not_before,
                    place: *places.get(seq)?,
                    delivered: kept.delivered,
                    dead_lettered: kept.dead_lettered,
                    returned: kept.returned,
                    failed: kept.failed,
                })
            })
            .collect::<Vec<_>>();
        RecoveredQueue::from(messages)
    }

    /// The whole state, for a snapshot: epoch, batch and home, then the records that make the
    /// messages again.
    #[must_use]
    pub fn snapshot(&self) -> Vec<u8> {
        let records = encode_batch(&self.records(0));
        let mut out = Vec::with_capacity(18 + self.home.len() + records.len());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.batch.to_le_bytes());
        out.extend_from_slice(&u16::try_from(self.home.len()).unwrap_or(0).to_le_bytes());
        out.extend_from_slice(self.home.as_bytes());
        out.extend_from_slice(&records);
        out
    }

    /// The state a [`Self::snapshot`] holds (a peer's bytes: refused whole when any part does
    /// not decode).
    ///
    /// # Errors
    /// What did not decode.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Self, &'static str> {
        let mut bytes = Bytes::copy_from_slice(bytes);
        let short = |_| "a snapshot cut short";
        let epoch = bytes.try_get_u64_le().map_err(short)?;
        let batch = bytes.try_get_u64_le().map_err(short)?;
        let home_len = usize::from(bytes.try_get_u16_le().map_err(short)?);
        if home_len > MAX_HOME || bytes.len() < home_len {
            return Err("a snapshot's home name cut short");
        }
        let home = String::from_utf8(bytes.split_to(home_len).to_vec()).map_err(|_| "a home name not UTF-8")?;
        let mut journal = Self { epoch, home, batch, messages: BTreeMap::new() };
        for record in decode_batch(&bytes)? {
            journal.apply_record(record);
        }
        Ok(journal)
    }
}
