//! A one-shot move of chosen messages (the dead-letter browser's "move"): each is found by its
//! id in the source without taking it ([`crate::queue::QueueHandle::browse`]), re-published to
//! the destination with a confirmation, and removed from the source only once every queue it
//! was routed to confirmed it — at least once, as a job moves messages.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::route::redriven;
use super::spec::Target;
use crate::metrics::REDRIVE_MESSAGES;
use crate::queue::{BrowseRequest, ConfirmTo, Enqueue, QueueRef, REFUSED_TO_PUBLISHER_BIT};
use crate::route_cache::RouteCache;
use crate::session::{SessionEvent, SessionSink};
use crate::vhost::VHost;

/// How long a move waits for its destinations' confirmations.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Ids a single move accepts at most.
pub const MAX_IDS: usize = 10_000;

/// What a one-shot move did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoveOutcome {
    /// Confirmed by their destination and removed from the source.
    pub moved: u64,
    /// Not found among the source's ready messages, not addressable, unroutable or refused:
    /// they stay in the source (if they are there).
    pub failed: u64,
}

/// Moves the ready messages `ids` of `source` to `target`; `session` is a fresh broker id for
/// the confirmations.
pub(super) async fn move_messages(
    vhost: &Arc<VHost>,
    source: &QueueRef,
    ids: &[u64],
    target: &Target,
    session: u64,
) -> Result<MoveOutcome, crate::error::EngineError> {
    let mut wanted: Vec<u64> = ids.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut outcome = MoveOutcome::default();
    let (sink, mut rx) = SessionSink::new(session, u32::MAX);
    let mut cache = RouteCache::new();
    // Publish number → (source seq, queues yet to confirm, refused).
    let mut pending: HashMap<u64, (u64, usize, bool)> = HashMap::new();
    for (n, id) in wanted.iter().enumerate() {
        let page = source
            .browse(BrowseRequest {
                after: id.checked_sub(1),
                before: None,
                newest_first: false,
                limit: 1,
                include_unacked: false,
                include_delayed: false,
            })
            .await?;
        let Some(item) = page.items.into_iter().next().filter(|item| item.seq == *id) else {
            outcome.failed += 1;
            continue;
        };
        let Ok(routing) = target.address(&item.message) else {
            outcome.failed += 1;
            continue;
        };
        let copy = redriven(&item.message, routing);
        let queues = match vhost.route(&mut cache, &copy.routing.exchange, &copy.routing, &copy.headers) {
            Ok(queues) if !queues.is_empty() => queues,
            _ => {
                outcome.failed += 1;
                continue;
            }
        };
        let number = (n as u64 + 1) | REFUSED_TO_PUBLISHER_BIT;
        pending.insert(number, (item.seq, queues.len(), false));
        let message = Arc::new(copy);
        for queue in queues.iter() {
            let enqueue = Enqueue { message: Arc::clone(&message), confirm: Some(number) };
            let to = ConfirmTo { session: sink.clone(), channel: 1 };
            if !queue.publish(vec![enqueue], Some(to)).await
                && let Some(entry) = pending.get_mut(&number)
            {
                entry.1 -= 1;
                entry.2 = true;
            }
        }
    }
    let mut confirmed = Vec::new();
    let settle = |pending: &mut HashMap<u64, (u64, usize, bool)>, confirmed: &mut Vec<u64>, failed: &mut u64| {
        pending.retain(|_, (seq, outstanding, refused)| {
            if *outstanding > 0 {
                return true;
            }
            if *refused {
                *failed += 1
            } else {
                confirmed.push(*seq)
            }
            false
        });
    };
    settle(&mut pending, &mut confirmed, &mut outcome.failed);
    let deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
    while !pending.is_empty() {
        let Ok(Some(event)) = tokio::time::timeout_at(deadline, rx.recv()).await else { break };
        if let SessionEvent::Confirms { accepted, refused, .. } = event {
            for (number, ok) in accepted.iter().map(|n| (n, true)).chain(refused.iter().map(|n| (n, false))) {
                if let Some(entry) = pending.get_mut(number) {
                    entry.1 = entry.1.saturating_sub(1);
                    entry.2 |= !ok;
                }
            }
            settle(&mut pending, &mut confirmed, &mut outcome.failed);
        }
    }
    // Unconfirmed in time: left in the source (a copy may still arrive: a duplicate).
    outcome.failed += pending.len() as u64;
    if !confirmed.is_empty() {
        outcome.moved = confirmed.len() as u64;
        source.remove(confirmed).await?;
    }
    let series = |outcome: &'static str| {
        metrics::counter!(REDRIVE_MESSAGES,
            "vhost" => vhost.name().to_owned(),
            "source" => source.name().to_owned(),
            "destination" => target.label().to_owned(),
            "outcome" => outcome)
    };
    series("moved").increment(outcome.moved);
    series("failed").increment(outcome.failed);
    Ok(outcome)
}
