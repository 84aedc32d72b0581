//! One pass of a job over its source.
//!
//! A pass takes the source's messages in one of two ways:
//!
//! - **Consuming** (a job without a filter that moves messages: the fast path). The job
//!   consumes the source like any consumer (its deliveries bounded by a window: the session's
//!   outbound [`crate::gate::Gate`]); a selected message's delivery is acknowledged once every
//!   queue its copy was routed to confirmed it. A message it cannot move is set aside,
//!   unacknowledged, and requeued to its place when the pass ends.
//! - **Browsing** (a job with a filter, or a dry run). The job reads the source page by page
//!   without taking anything ([`crate::queue::QueueHandle::browse`], oldest first, from its
//!   [`super::sweep::Sweep`] cursor) and moves only what the filter selects: it publishes the
//!   copies, waits for every destination's confirmation, then removes those sequence numbers
//!   from the source ([`crate::queue::QueueHandle::remove`]). Messages the filter skips are
//!   never held: they stay ready for the source's consumers throughout (a filter selecting 10
//!   of 10,000 leaves 9,990 untouched). A message taken or deleted between its page and its
//!   removal is not removed twice nor counted as moved (its copy went out: a duplicate).
//!
//! Either way a copy is re-published through the vhost's normal route (route cache, exchange
//! bindings) with a confirmation per message, and the source lets it go only after every queue
//! it was routed to confirmed it. Consuming, a copy routed to one queue alone is moved: its log
//! record there also removes the message from the source, so a crash leaves it in exactly one
//! of the two ([`Pass::address`]). Any other copy is not: a crash before the source let the
//! message go leaves it in the source too (moved again later: a duplicate, never a loss) — a
//! consumed delivery whose ack was not yet logged comes back; a removal is logged like an
//! acknowledgement, not synced, so a removed message can come back too — above the browsing
//! job's recorded cursor it is moved again, below it it stays in the source as well as at the
//! destinations. The cursor is only ever recorded below every message not yet confirmed, so
//! nothing is skipped unmoved.
//!
//! A pass ends when it has looked at what the source held when the pass began (as many ready
//! messages when consuming; up to the newest one when browsing: new arrivals wait for the next
//! job), when `max_messages` are moved, when the source runs dry, or when the job is paused or
//! cancelled; a destination that refuses a message (a full `reject-publish` queue, a deleted
//! queue, no route) pauses it with the reason. Messages in flight are settled before the pass
//! returns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use charon_model::{Message, Table};
use foldhash::{HashMap as FastMap, HashMapExt};
use tokio::sync::{mpsc, watch};

use super::bucket::TokenBucket;
use super::filter::last_death;
use super::job::{Control, Job, JobView};
use super::lifecycle::Lifecycle;
use super::progress::{DryRunResult, RateMeter};
use super::route::redriven;
use super::spec::Target;
use super::sweep::{Cursor, Sweep};
use crate::metrics::REDRIVE_MESSAGES;
use crate::publisher::{Answered, Flush, Outstanding, Publisher};
use crate::queue::{BrowseRequest, ConsumeSpec, QueueRef, REFUSED_TO_PUBLISHER_BIT, Settle};
use crate::session::{Delivery, Owner, SessionEvent, SessionSink};
use crate::vhost::VHost;

/// Deliveries a job holds at most before settling or setting them aside (consuming), or
/// selected messages it keeps in memory before reading the next page (browsing).
pub(super) const WINDOW: u32 = 2048;

/// Messages a browsing pass reads per page.
const PAGE: usize = 2048;

/// How long a pass waits without deliveries before it asks whether the source ran dry.
const IDLE_CHECK: Duration = Duration::from_millis(200);

/// How often a running job's progress is written to the store (a crash loses at most this
/// much of its counts; never a message).
const SAVE_EVERY: Duration = Duration::from_millis(250);

/// Why a pass ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PassEnd {
    /// Everything it was to look at was looked at (or the maximum moved).
    Completed,
    /// Paused by a user (`None`) or by a destination that refused (the reason).
    Paused(Option<String>),
    /// Cancelled by a user.
    Cancelled,
    /// The source is gone.
    Failed(String),
    /// The source's node (in a cluster) does not answer: the pass is tried again.
    Unavailable(String),
}

/// How a source that did not answer ends a pass: a queue of another node that is down (or a
/// node that has not joined its cluster yet) is waited for; any other queue is gone.
fn unanswered(error: &crate::error::EngineError) -> PassEnd {
    match error {
        crate::error::EngineError::HomeNodeDown { .. } => PassEnd::Unavailable(error.to_string()),
        other => PassEnd::Failed(other.to_string()),
    }
}

/// The `charon_redrive_messages_total` series of one job.
struct Counters {
    moved: metrics::Counter,
    skipped: metrics::Counter,
    failed: metrics::Counter,
}

impl Counters {
    fn new(view: &JobView) -> Self {
        let series = |outcome: &'static str| {
            metrics::counter!(REDRIVE_MESSAGES,
                "vhost" => view.vhost.clone(),
                "source" => view.source.clone(),
                "destination" => view.destination.label().to_owned(),
                "outcome" => outcome)
        };
        Self { moved: series("moved"), skipped: series("skipped"), failed: series("failed") }
    }
}

/// One pass's state.
struct Pass<'a> {
    job: &'a Arc<Job>,
    vhost: &'a Arc<VHost>,
    lifecycle: &'a Lifecycle,
    source: QueueRef,
    sink: SessionSink,
    target: Target,
    dry_run: bool,
    filter: super::spec::Filter,
    counters: Counters,
    /// Messages to look at in this pass, and how many were.
    to_see: u64,
    seen: u64,
    /// How many more may move (`max_messages`).
    allowance: u64,
    /// Set aside: requeued when the pass ends (consuming).
    aside: Vec<u64>,
    /// Browsing: where the pass is in the source, and the newest message it looks at.
    cursor: Option<Cursor>,
    until: u64,
    /// Copies routed, not yet handed to their queues.
    publisher: Publisher,
    /// Copies waiting for their destinations' confirmations, by the source message's seq.
    pending: Outstanding<u64>,
    /// Destination queues by id: their confirm channel, looked up per copy (foldhash: the
    /// keys are queue ids, ours). Channel `n + 2` is the queue `queues[n]`.
    channels: FastMap<u64, u32>,
    queues: Vec<QueueRef>,
    bucket: Option<TokenBucket>,
    meter: RateMeter,
    last_save: Instant,
    dry: DryRunResult,
    /// Selected messages waiting for their turn (the rate), and when the next may go.
    backlog: std::collections::VecDeque<Delivery>,
    wake: Option<Instant>,
    /// Set once the pass looked at all it was to look at (or selected its maximum).
    exhausted: bool,
    /// Set once the pass is to end, with how.
    end: Option<PassEnd>,
    /// Counts of this pass, and how much of them the job's view already has.
    moved: u64,
    skipped: u64,
    failed: u64,
    folded: (u64, u64, u64),
}

/// Runs one pass of `job` over its source.
pub(super) async fn run(
    job: &Arc<Job>,
    vhost: &Arc<VHost>,
    lifecycle: &Lifecycle,
    control: &mut watch::Receiver<Control>,
) -> PassEnd {
    let view = job.view();
    let session = lifecycle.next_id();
    let source = match vhost.queue(&view.source, session) {
        Ok(queue) => queue,
        Err(e) => return PassEnd::Failed(e.to_string()),
    };
    let ready = match source.stats().await {
        Ok(stats) => u64::from(stats.ready),
        Err(e) => return unanswered(&e),
    };
    let allowance = if view.dry_run { u64::MAX } else { view.allowance() };
    let browsing = view.dry_run || !view.filter.is_empty();
    // A dry run counts from the start every pass; a filtered job goes on from its cursor.
    let sweep = if view.dry_run { Sweep::default() } else { job.sweep().unwrap_or_default() };
    let to_see = if browsing { ready.saturating_sub(sweep.skipped) } else { ready };
    job.update(|v| {
        v.progress.skipped = if browsing { sweep.skipped } else { 0 };
        v.progress.remaining = to_see.min(allowance);
        v.dry_run_result = None;
    });
    if ready == 0 || allowance == 0 {
        return PassEnd::Completed;
    }
    let window = u32::try_from(allowance.min(ready)).unwrap_or(WINDOW).clamp(1, WINDOW);
    let window = view.rate.map_or(window, |rate| window.min(rate));
    let (sink, mut rx) = SessionSink::new(session, window);
    let mut pass = Pass::new(job, vhost, lifecycle, &source, sink, &view);
    pass.to_see = to_see;
    pass.allowance = allowance;
    if browsing {
        // The newest message now bounds the pass.
        let newest = BrowseRequest { newest_first: true, ..BrowseRequest::oldest(1) };
        match source.browse(newest).await {
            Ok(page) => match page.items.first() {
                Some(item) => pass.until = item.seq,
                None => return PassEnd::Completed,
            },
            Err(e) => return PassEnd::Failed(e.to_string()),
        }
        pass.cursor = Some(Cursor::resume(sweep));
        pass.drive(&mut rx, control).await;
        while let Ok(event) = rx.try_recv() {
            pass.after_end(event).await;
        }
        return pass.finish().await;
    }
    let consumer = lifecycle.next_id();
    let spec = ConsumeSpec {
        id: consumer,
        tag: format!("charon-redrive-{}", view.id),
        owner: Owner { session, channel: 1 },
        session: pass.sink.clone(),
        no_ack: false,
        prefetch: 0,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: Table::new(),
    };
    if let Err(e) = source.consume(spec).await {
        return unanswered(&e);
    }
    pass.drive(&mut rx, control).await;
    // Every delivery to the consumer was sent before the cancel returns: what is left in the
    // inbox is set aside with the rest.
    source.cancel(consumer).await;
    while let Ok(event) = rx.try_recv() {
        pass.after_end(event).await;
    }
    let end = pass.finish().await;
    // A queue of another node hands a remote consumer what its node's window allows, more than
    // may have reached this node: what the pass never saw goes back to the queue now, before a
    // next pass counts the source (a local queue has nothing left to give back).
    source.owner_closed(Owner { session, channel: 1 }).await;
    end
}

impl<'a> Pass<'a> {
    fn new(
        job: &'a Arc<Job>,
        vhost: &'a Arc<VHost>,
        lifecycle: &'a Lifecycle,
        source: &QueueRef,
        sink: SessionSink,
        view: &JobView,
    ) -> Self {
        let now = Instant::now();
        Pass {
            job,
            vhost,
            lifecycle,
            source: Arc::clone(source),
            sink: sink.clone(),
            target: view.destination.clone(),
            dry_run: view.dry_run,
            filter: view.filter.clone(),
            counters: Counters::new(view),
            to_see: 0,
            seen: 0,
            allowance: 0,
            aside: Vec::new(),
            cursor: None,
            until: 0,
            publisher: Publisher::new(Some(sink.clone())),
            pending: Outstanding::new(REFUSED_TO_PUBLISHER_BIT),
            channels: FastMap::new(),
            queues: Vec::new(),
            bucket: view.rate.map(|rate| TokenBucket::new(rate, now)),
            meter: RateMeter::new(now, view.progress.moved),
            last_save: now,
            dry: DryRunResult::default(),
            backlog: std::collections::VecDeque::new(),
            wake: None,
            exhausted: false,
            end: None,
            moved: 0,
            skipped: 0,
            failed: 0,
            folded: (0, 0, 0),
        }
    }

    async fn drive(&mut self, rx: &mut mpsc::UnboundedReceiver<SessionEvent>, control: &mut watch::Receiver<Control>) {
        let mut idle_since = Instant::now();
        loop {
            if self.end.is_none() && self.exhausted && self.backlog.is_empty() && self.pending.is_empty() {
                self.end = Some(PassEnd::Completed);
            }
            if self.end.is_some() {
                let backlog: Vec<u64> = self.backlog.drain(..).map(|d| d.seq).collect();
                self.set_aside(backlog.into_iter());
                self.wake = None;
                if self.pending.is_empty() {
                    return;
                }
            }
            let idle =
                self.cursor.is_none() && self.end.is_none() && self.pending.is_empty() && self.backlog.is_empty();
            let wants_page = self.wants_page();
            let idle_at = idle_since + IDLE_CHECK;
            let wake = self.wake.unwrap_or(idle_at);
            tokio::select! {
                biased;
                changed = control.changed() => match changed.map(|()| *control.borrow_and_update()) {
                    Ok(Control::Run) => {}
                    Ok(Control::Pause) => self.stop(PassEnd::Paused(None)),
                    Ok(Control::Cancel) | Err(_) => self.stop(PassEnd::Cancelled),
                },
                event = rx.recv() => {
                    idle_since = Instant::now();
                    match event {
                        Some(event) => self.handle(event).await,
                        None => self.stop(PassEnd::Cancelled),
                    }
                }
                () = std::future::ready(()), if wants_page => {
                    self.next_page().await;
                    self.publish_progress();
                }
                () = tokio::time::sleep_until(wake.into()), if self.wake.is_some() => {
                    self.wake = None;
                    self.pump().await;
                    self.publish_progress();
                }
                () = tokio::time::sleep_until(idle_at.into()), if idle && self.wake.is_none() => {
                    idle_since = Instant::now();
                    // Fewer messages than it had (consumed or expired meanwhile): done once dry.
                    match self.source.stats().await {
                        Ok(stats) if stats.ready > 0 => {}
                        Err(e @ crate::error::EngineError::HomeNodeDown { .. }) => {
                            self.stop(PassEnd::Unavailable(e.to_string()));
                        }
                        _ => self.stop(PassEnd::Completed),
                    }
                }
            }
        }
    }

    /// Ends the pass with `end`, unless it is ending already.
    fn stop(&mut self, end: PassEnd) {
        if self.end.is_none() {
            self.end = Some(end);
        }
    }

    async fn handle(&mut self, event: SessionEvent) {
        match event {
            SessionEvent::Deliveries { items, .. } => self.deliveries(items).await,
            SessionEvent::Confirms { channel, accepted, refused } => self.confirms(channel, &accepted, &refused).await,
            SessionEvent::ConsumerCancelled { .. } => {
                self.stop(PassEnd::Failed(format!("source queue '{}' was deleted", self.source.name())));
            }
            _ => {}
        }
        self.publish_progress();
    }

    /// Whether a browsing pass is to read its next page: it is taking messages and has room.
    fn wants_page(&self) -> bool {
        self.cursor.is_some()
            && self.end.is_none()
            && !self.exhausted
            && self.backlog.len() + self.pending.len() < WINDOW as usize
    }

    /// Reads the next page above the cursor and sorts its messages.
    async fn next_page(&mut self) {
        let Some(cursor) = &self.cursor else { return };
        let request = BrowseRequest {
            after: cursor.read(),
            before: Some(self.until.saturating_add(1)),
            newest_first: false,
            limit: PAGE,
            include_unacked: false,
            // A delayed message is not ready: a redrive moves it once it is due.
            include_delayed: false,
        };
        let page = match self.source.browse(request).await {
            Ok(page) => page,
            Err(_) => {
                self.stop(PassEnd::Failed(format!("source queue '{}' was deleted", self.source.name())));
                return;
            }
        };
        if !page.has_more {
            // This page holds the rest (what is read of it below).
            self.exhausted = true;
        }
        let mut items = page.items.into_iter();
        while !self.taken_enough() {
            let Some(item) = items.next() else { break };
            let delivery =
                Delivery { seq: item.seq, message: item.message, redelivered: item.redelivered, delivery_count: 0 };
            self.sort(delivery);
        }
        if self.taken_enough() {
            self.exhausted = true;
        }
        if self.wake.is_none() {
            self.pump().await;
        }
    }

    /// Whether the pass selected as many as it may move.
    fn taken_enough(&self) -> bool {
        self.moved + self.pending.len() as u64 + self.backlog.len() as u64 >= self.allowance
    }

    /// Events after the consumer was cancelled: deliveries are set aside.
    async fn after_end(&mut self, event: SessionEvent) {
        if let SessionEvent::Deliveries { items, .. } = event {
            self.set_aside(items.iter().map(|d| d.seq));
        } else {
            self.handle(event).await;
        }
    }

    /// Leaves messages in the source: consuming, they are requeued when the pass ends; browsing
    /// holds nothing (its cursor keeps what is still to move open).
    fn set_aside(&mut self, seqs: impl Iterator<Item = u64>) {
        if self.cursor.is_some() {
            return;
        }
        let before = self.aside.len();
        self.aside.extend(seqs);
        let n = u32::try_from(self.aside.len() - before).unwrap_or(u32::MAX);
        self.sink.outbound.release(n);
    }

    /// Sorts deliveries: the ones the filter selects wait in the backlog for their turn (the
    /// rate), the others are set aside.
    async fn deliveries(&mut self, items: Vec<Delivery>) {
        for delivery in items {
            let taking = self.end.is_none() && !self.exhausted;
            if !taking {
                self.set_aside(std::iter::once(delivery.seq));
                continue;
            }
            self.sort(delivery);
            if self.seen >= self.to_see || self.taken_enough() {
                self.exhausted = true;
            }
        }
        if self.wake.is_none() {
            self.pump().await;
        }
    }

    /// Looks at one message: skipped, counted (dry run) or selected into the backlog.
    fn sort(&mut self, delivery: Delivery) {
        self.seen += 1;
        let seq = delivery.seq;
        let message = &delivery.message;
        if !self.filter.matches(message) {
            self.skipped += 1;
            match self.cursor.as_mut() {
                Some(cursor) => cursor.skip(seq),
                None => self.set_aside(std::iter::once(seq)),
            }
        } else if self.dry_run {
            self.dry.count(last_death(message).map(|(d, _)| (d.reason.as_str(), d.queue.as_str())));
            match self.cursor.as_mut() {
                Some(cursor) => cursor.pass(seq),
                None => self.set_aside(std::iter::once(seq)),
            }
        } else {
            if let Some(cursor) = self.cursor.as_mut() {
                cursor.select(seq);
            }
            self.backlog.push_back(delivery);
        }
    }

    /// Publishes from the backlog as the rate allows; when it allows nothing, sets when to
    /// try again.
    async fn pump(&mut self) {
        let now = Instant::now();
        while !self.backlog.is_empty() && self.end.is_none() {
            if let Some(bucket) = self.bucket.as_mut() {
                let (taken, wait) = bucket.take(1, now);
                if taken == 0 {
                    self.wake = Some(now + wait.unwrap_or(Duration::from_millis(1)));
                    break;
                }
            }
            if let Some(delivery) = self.backlog.pop_front() {
                self.address(&delivery);
            }
        }
        self.flush().await;
    }

    /// Routes one selected message and hands it to the publisher; a message that cannot go is
    /// set aside as failed (and a destination that cannot take it pauses the job).
    ///
    /// A copy of a message the job holds as a delivery (consuming), routed to one queue alone,
    /// is *moved* ([`Publisher::push_moved`]): a crash leaves it in exactly one of the two
    /// queues. Any other copy is published as it is, and the source lets the message go once
    /// every queue confirmed it: a crash in between can leave it in the source too (moved
    /// again later: at least once). That covers a copy that fans out (one queue's record
    /// cannot remove the source for all), a source or destination of another node of the
    /// cluster (whose log is not this node's), and a message a browsing pass reads while it stays
    /// ready in the source: a consumer of the source could take and requeue it, still in use
    /// there after its log record was removed. A destination without room refuses a moved
    /// copy in any overflow mode (`reject-publish-dlx` without dead-lettering a second copy).
    fn address(&mut self, delivery: &Delivery) {
        let routing = match self.target.address(&delivery.message) {
            Ok(routing) => routing,
            // Not the destination's fault: counted, left in the source, the job goes on.
            Err(_) => {
                self.fail(delivery.seq, None);
                return;
            }
        };
        let copy: Message = redriven(&delivery.message, routing);
        let queues = match self.publisher.route(self.vhost, &copy) {
            Ok(queues) => queues,
            Err(e) => {
                self.fail(delivery.seq, Some(e.to_string()));
                return;
            }
        };
        if queues.is_empty() {
            let routing = &copy.routing;
            let reason = format!(
                "unroutable: exchange '{}' routes routing key '{}' to no queue",
                routing.exchange, routing.routing_key
            );
            self.fail(delivery.seq, Some(reason));
            return;
        }
        let number = self.pending.expect(queues.len(), delivery.seq);
        let copy = Arc::new(copy);
        match &*queues {
            // One log takes both records only when source and destination are this node's.
            [queue] if self.cursor.is_none() && queue.home.is_none() && self.source.home.is_none() => {
                let channel = self.channel_of(queue);
                self.publisher.push_moved(queue, channel, copy, number, (self.source.id, delivery.seq));
            }
            _ => {
                for queue in queues.iter() {
                    let channel = self.channel_of(queue);
                    self.publisher.push(std::slice::from_ref(queue), channel, &copy, Some(number));
                }
            }
        }
    }

    /// A message that cannot move: it stays in the source; a destination's refusal (`pause`)
    /// pauses the job with that reason.
    /// Browsing, a message no destination can take is decided (the cursor passes it); one a
    /// destination refused stays open, to be tried again when the job resumes.
    fn fail(&mut self, seq: u64, pause: Option<String>) {
        self.failed += 1;
        self.set_aside(std::iter::once(seq));
        if let Some(cursor) = self.cursor.as_mut().filter(|_| pause.is_none()) {
            cursor.close(seq);
        }
        if let Some(reason) = pause {
            self.stop(PassEnd::Paused(Some(reason)));
        }
    }

    /// Hands the routed copies to their queues, waiting while one holds its publishers back;
    /// a queue that is gone refuses its copies.
    async fn flush(&mut self) {
        for (channel, numbers) in self.publisher.flush(Flush::Wait).await {
            self.confirms(channel, &[], &numbers).await;
        }
    }

    fn channel_of(&mut self, queue: &QueueRef) -> u32 {
        if let Some(channel) = self.channels.get(&queue.id) {
            return *channel;
        }
        let channel = u32::try_from(self.queues.len()).unwrap_or(u32::MAX).saturating_add(2);
        self.queues.push(queue.clone());
        self.channels.insert(queue.id, channel);
        channel
    }

    /// Confirmations from a destination queue: messages every queue accepted are acknowledged
    /// at the source; one that any refused stays there, and the job pauses.
    async fn confirms(&mut self, channel: u32, accepted: &[u64], refused: &[u64]) {
        let answers = accepted.iter().map(|s| (*s, true)).chain(refused.iter().map(|s| (*s, false)));
        let done: Vec<Answered<u64>> =
            answers.filter_map(|(number, ok)| self.pending.answer(number, channel, ok)).collect();
        let mut acked = Vec::new();
        for Answered { value: source_seq, refused_on } in done {
            match refused_on {
                None => acked.push(source_seq),
                Some(channel) => {
                    let queue = channel.checked_sub(2).and_then(|i| self.queues.get(i as usize)).cloned();
                    // A queue of another node refuses what it could not send there: its node is
                    // down, and the pass waits for it rather than pausing the job.
                    if let Some(queue) = queue.as_ref().filter(|q| q.home.is_some())
                        && let Err(e @ crate::error::EngineError::HomeNodeDown { .. }) = queue.stats().await
                    {
                        self.set_aside(std::iter::once(source_seq));
                        self.stop(PassEnd::Unavailable(e.to_string()));
                        continue;
                    }
                    let reason = format!(
                        "destination queue '{}' refused the message (full with overflow reject-publish, or deleted)",
                        queue.as_ref().map_or("", |q| q.name())
                    );
                    self.fail(source_seq, Some(reason));
                }
            }
        }
        if acked.is_empty() {
            return;
        }
        if self.cursor.is_some() {
            self.remove(acked).await;
            return;
        }
        self.moved += acked.len() as u64;
        let n = u32::try_from(acked.len()).unwrap_or(u32::MAX);
        self.source.settle(acked, Settle::Ack).await;
        self.sink.outbound.release(n);
    }

    /// Browsing: removes from the source the messages whose copies every destination confirmed.
    /// Only those it removed count as moved: one taken or deleted meanwhile is not there any
    /// more (its copy is a duplicate) and is not counted.
    async fn remove(&mut self, confirmed: Vec<u64>) {
        let removed = self.source.remove(confirmed.clone()).await;
        if let Some(cursor) = self.cursor.as_mut() {
            for seq in &confirmed {
                cursor.close(*seq);
            }
        }
        match removed {
            Ok(removed) => self.moved += removed.len() as u64,
            Err(_) => self.stop(PassEnd::Failed(format!("source queue '{}' was deleted", self.source.name()))),
        }
    }

    /// Folds the counts into the job's view and the metrics; writes the record about once a
    /// second.
    fn publish_progress(&mut self) {
        let (moved, skipped, failed) =
            (self.moved - self.folded.0, self.skipped - self.folded.1, self.failed - self.folded.2);
        self.folded = (self.moved, self.skipped, self.failed);
        self.counters.moved.increment(moved);
        self.counters.skipped.increment(skipped);
        self.counters.failed.increment(failed);
        let remaining = self.to_see.saturating_sub(self.seen);
        let now = Instant::now();
        let total = self.job.update(|v| {
            v.progress.moved += moved;
            v.progress.skipped += skipped;
            v.progress.failed += failed;
            v.progress.remaining = remaining.min(v.allowance());
            v.progress.moved
        });
        let rate = self.meter.sample(now, total);
        self.job.update(|v| v.progress.set_rate(rate));
        if let Some(cursor) = self.cursor.as_ref().filter(|_| !self.dry_run) {
            self.job.set_sweep(Some(cursor.committed()));
        }
        if now.duration_since(self.last_save) >= SAVE_EVERY {
            self.last_save = now;
            drop(self.lifecycle.save(self.job));
        }
    }

    /// Requeues what was set aside (in one settle, so each goes back to its place), folds the
    /// last counts and says how the pass ended.
    async fn finish(mut self) -> PassEnd {
        if !self.aside.is_empty() {
            let aside = std::mem::take(&mut self.aside);
            self.source.settle(aside, Settle::Requeue).await;
        }
        self.publish_progress();
        let end = self.end.take().unwrap_or(PassEnd::Completed);
        if end == PassEnd::Completed {
            // The sweep is over: a job that ran again would start a new one.
            self.job.set_sweep(None);
        } else if self.cursor.is_some() && !self.dry_run {
            // Where a paused job resumes (or a restarted one, were the broker to stop now).
            drop(self.lifecycle.save(self.job));
        }
        if self.dry_run && end == PassEnd::Completed {
            let dry = std::mem::take(&mut self.dry);
            self.job.update(|v| v.dry_run_result = Some(dry));
        }
        end
    }
}
