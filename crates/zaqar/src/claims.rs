//! Claims: messages taken from a queue as unacknowledged deliveries held by an engine owner of
//! their own (a fresh session id per claim), with a deadline. Deleting a claimed message acknowledges it; releasing the claim,
//! or letting it expire, requeues its messages (the queue counts the return: a Zaqar queue is a
//! quorum queue, whose return counts are Zaqar's claim counts and are logged on every return).
//!
//! The registry is looked up by claim id and by message; nothing here walks a queue.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use charon_engine::{QueueRef, Settle};
use charon_model::Message;

/// How often expired claims are looked for.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// A claimed message.
#[derive(Clone, Debug)]
pub(crate) struct Claimed {
    /// Its sequence number in the queue.
    pub(crate) seq: u64,
    /// The message.
    pub(crate) message: Arc<Message>,
    /// Times it was claimed, this claim included.
    pub(crate) count: u32,
}

/// One claim.
#[derive(Clone, Debug)]
pub(crate) struct Claim {
    /// The project (vhost).
    pub(crate) project: String,
    /// The queue.
    pub(crate) queue: QueueRef,
    /// Its messages still claimed.
    pub(crate) messages: Vec<Claimed>,
    /// Seconds it lasts from its last renewal.
    pub(crate) ttl: u64,
    /// Seconds of grace (validated and shown; see docs/zaqar.md).
    pub(crate) grace: u64,
    /// When it was made, ms since the epoch.
    pub(crate) created_ms: i64,
    /// When it expires, ms since the epoch.
    pub(crate) expires_ms: i64,
}

impl Claim {
    fn is_for(&self, project: &str, queue: &str) -> bool {
        self.project == project && self.queue.name() == queue
    }
}

/// What deleting a message finds about its claim.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// Not claimed.
    Free,
    /// Claimed by the claim named in the request: it was taken out of the claim, to be acked.
    Taken,
    /// Claimed, and the request named no claim or another one (403).
    Other,
    /// The request named a claim that does not exist or expired (400).
    NoSuchClaim,
}

#[derive(Debug, Default)]
struct State {
    by_id: HashMap<String, Claim>,
    /// (queue id, seq) -> claim id.
    by_message: HashMap<(u64, u64), String>,
}

/// Every live claim.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    state: parking_lot::Mutex<State>,
}

impl Claims {
    /// Registers a claim under `id`.
    pub(crate) fn insert(&self, id: String, claim: Claim) {
        let mut state = self.state.lock();
        for m in &claim.messages {
            state.by_message.insert((claim.queue.id, m.seq), id.clone());
        }
        state.by_id.insert(id, claim);
    }

    /// A live claim of `queue`.
    pub(crate) fn get(&self, project: &str, queue: &str, id: &str, now_ms: i64) -> Option<Claim> {
        let state = self.state.lock();
        state.by_id.get(id).filter(|c| c.is_for(project, queue) && c.expires_ms > now_ms).cloned()
    }

    /// The claim holding message `seq` of `queue`, if live.
    pub(crate) fn claim_of(&self, queue: &QueueRef, seq: u64, now_ms: i64) -> Option<(String, u32)> {
        let state = self.state.lock();
        let id = state.by_message.get(&(queue.id, seq))?;
        let claim = state.by_id.get(id).filter(|c| c.expires_ms > now_ms)?;
        let count = claim.messages.iter().find(|m| m.seq == seq).map_or(0, |m| m.count);
        Some((id.clone(), count))
    }

    /// Renews a live claim: it lasts `ttl` seconds from now. False when there is none.
    pub(crate) fn renew(&self, project: &str, queue: &str, id: &str, ttl: u64, grace: u64, now_ms: i64) -> bool {
        let mut state = self.state.lock();
        match state.by_id.get_mut(id).filter(|c| c.is_for(project, queue) && c.expires_ms > now_ms) {
            Some(claim) => {
                claim.ttl = ttl;
                claim.grace = grace;
                claim.expires_ms = now_ms.saturating_add(seconds_ms(ttl));
                true
            }
            None => false,
        }
    }

    /// Removes a claim of `queue` (live or not), returning it.
    pub(crate) fn remove(&self, project: &str, queue: &str, id: &str) -> Option<Claim> {
        let mut state = self.state.lock();
        if !state.by_id.get(id).is_some_and(|c| c.is_for(project, queue)) {
            return None;
        }
        let claim = state.by_id.remove(id)?;
        for m in &claim.messages {
            state.by_message.remove(&(claim.queue.id, m.seq));
        }
        Some(claim)
    }

    /// Deleting message `seq` of `queue` with claim id `cid` (Zaqar's rules): takes it out of
    /// its claim when `cid` names the live claim that holds it.
    pub(crate) fn take(&self, queue: &QueueRef, seq: u64, cid: Option<&str>, now_ms: i64) -> Holder {
        let mut state = self.state.lock();
        let holder = state.by_message.get(&(queue.id, seq)).cloned();
        let live = |state: &State, id: &str| state.by_id.get(id).is_some_and(|c| c.expires_ms > now_ms);
        let holder = holder.filter(|id| live(&state, id));
        match (holder, cid) {
            // Not claimed: free, whatever claim the request names (the handler refuses a claim
            // id for an unclaimed message, as Zaqar's `MessageNotClaimed`).
            (None, _) => Holder::Free,
            (Some(holder), Some(cid)) if holder == cid => {
                state.by_message.remove(&(queue.id, seq));
                if let Some(claim) = state.by_id.get_mut(&holder) {
                    claim.messages.retain(|m| m.seq != seq);
                }
                Holder::Taken
            }
            (Some(_), Some(cid)) if !live(&state, cid) => Holder::NoSuchClaim,
            (Some(_), _) => Holder::Other,
        }
    }

    /// Takes every claimed message of `queue` out of its claim (a purge or delete).
    pub(crate) fn take_all(&self, queue: &QueueRef) -> Vec<u64> {
        let mut state = self.state.lock();
        let ids: Vec<String> =
            state.by_id.iter().filter(|(_, c)| c.queue.id == queue.id).map(|(id, _)| id.clone()).collect();
        let mut seqs = Vec::new();
        for id in ids {
            if let Some(claim) = state.by_id.remove(&id) {
                for m in claim.messages {
                    state.by_message.remove(&(queue.id, m.seq));
                    seqs.push(m.seq);
                }
            }
        }
        seqs
    }

    /// Removes the claims that expired by `now_ms`.
    fn expired(&self, now_ms: i64) -> Vec<Claim> {
        let mut state = self.state.lock();
        let ids: Vec<String> =
            state.by_id.iter().filter(|(_, c)| c.expires_ms <= now_ms).map(|(id, _)| id.clone()).collect();
        let mut expired = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(claim) = state.by_id.remove(&id) {
                for m in &claim.messages {
                    state.by_message.remove(&(claim.queue.id, m.seq));
                }
                expired.push(claim);
            }
        }
        expired
    }

    /// Requeues the messages of expired claims, every [`SWEEP_EVERY`], until `claims` is dropped.
    pub(crate) async fn sweep(claims: std::sync::Weak<Self>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(claims) = claims.upgrade() else { return };
            claims.release_expired(crate::message::now_ms()).await;
        }
    }

    /// Requeues the messages of the claims that expired by `now_ms`; returns how many claims.
    pub(crate) async fn release_expired(&self, now_ms: i64) -> usize {
        let expired = self.expired(now_ms);
        for claim in &expired {
            release(claim).await;
        }
        expired.len()
    }
}

/// Puts a claim's messages back in their queue (the return counts as one more claim).
pub(crate) async fn release(claim: &Claim) {
    let seqs: Vec<u64> = claim.messages.iter().map(|m| m.seq).collect();
    if !seqs.is_empty() {
        claim.queue.settle(seqs, Settle::Requeue).await;
    }
}

/// Seconds in ms.
pub(crate) fn seconds_ms(seconds: u64) -> i64 {
    i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// A new claim id: 24 hex digits, like Zaqar's ObjectIds.
pub(crate) fn new_id() -> String {
    format!("{:024x}", rand::random::<u128>() & ((1u128 << 96) - 1))
}
