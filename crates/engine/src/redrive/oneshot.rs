//! A one-shot move of chosen messages (the dead-letter browser's "move"): each is found by its
//! id in the source without taking it ([`crate::queue::QueueHandle::browse`]), re-published to
//! the destination with a confirmation, and removed from the source only once every queue it
//! was routed to confirmed it — at least once, as a job moves messages.

use std::sync::Arc;
use std::time::Duration;

use super::route::redriven;
use super::spec::Target;
use crate::metrics::REDRIVE_MESSAGES;
use crate::publisher::{Answered, Flush, Outstanding, Publisher};
use crate::queue::{BrowseRequest, QueueRef, REFUSED_TO_PUBLISHER_BIT};
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
    let mut publisher = Publisher::new(Some(sink));
    // Copies waiting for every queue they were routed to, by the source message's seq.
    let mut pending: Outstanding<u64> = Outstanding::new(REFUSED_TO_PUBLISHER_BIT);
    let mut confirmed = Vec::new();
    let mut settle = |answered: Option<Answered<u64>>, failed: &mut u64| match answered {
        Some(Answered { value, refused_on: None }) => confirmed.push(value),
        Some(Answered { refused_on: Some(_), .. }) => *failed += 1,
        None => {}
    };
    for id in &wanted {
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
        let queues = match publisher.route(vhost, &copy) {
            Ok(queues) if !queues.is_empty() => queues,
            _ => {
                outcome.failed += 1;
                continue;
            }
        };
        let number = pending.expect(queues.len(), item.seq);
        publisher.push(&queues, 1, &Arc::new(copy), Some(number));
        // One at a time, as the messages are found: a move of many does not hold them all.
        for (channel, numbers) in publisher.flush(Flush::Wait).await {
            for number in numbers {
                settle(pending.answer(number, channel, false), &mut outcome.failed);
            }
        }
    }
    let deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
    while !pending.is_empty() {
        let Ok(Some(event)) = tokio::time::timeout_at(deadline, rx.recv()).await else { break };
        if let SessionEvent::Confirms { channel, accepted, refused } = event {
            for (number, ok) in accepted.iter().map(|n| (*n, true)).chain(refused.iter().map(|n| (*n, false))) {
                settle(pending.answer(number, channel, ok), &mut outcome.failed);
            }
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
