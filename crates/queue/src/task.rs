//! The task that owns one queue.
//!
//! Each pass takes a batch of commands from the mailbox, applies them to the
//! [`QueueState`], expires the head, dispatches, dead-letters what left the queue, and sends
//! the resulting events. Between passes it waits for the next command, the next deadline (the
//! head's TTL, `x-expires`), or room in the mailbox of a queue it is dead-lettering to.
//!
//! The task never reads or writes the log itself: a durable queue's recovered messages are
//! restored on the blocking pool before the first command, and paged messages are read there
//! too. When a command cannot be answered without the message being read — a `basic.get`
//! on an empty head, a drop-head over a limit — the task waits for that read, neither
//! answering early nor letting a later command overtake: the rest of the batch stays parked
//! and the pass's effects are held until the read is done.
//!
//! A persisted message that dies keeps its log record until every queue its dead letter went
//! to confirmed the copy (`unconfirmed.rs`): the confirms come back to the task's own inbox.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use charon_model::Message;
use tokio::sync::{mpsc, oneshot};

use super::command::QueueCmd;
use super::dlx_pending::NUMBER_BIT as DLX_NUMBER_BIT;
use super::handle::QueueRef;
use super::journal::LETTER_LOG_KEY;
use super::links::{OnSelfDelete, QueueLinks, Replicate, Replicated};
use super::outbox::{Outbox, room_in};
use super::requests::{ConfirmTo, GetOk};
use super::settings::QueueSettings;
use super::state::{QueueState, ReadPending};
use super::unconfirmed::Unconfirmed;
use charon_store::segment_log::{Completion, LogFailure, MessageLog, Placed, Record, RecoveredQueue, encode_batch};

use crate::clock::now_ms;
use crate::dead_letter::{DeadLetterSink, DeadLetterer, DropReason, Forward, Outcome, marked_dropped};
use crate::session::{SessionEvent, SessionSink};

/// Commands taken from the mailbox per pass: large enough to amortise one dispatch over many
/// publishes, small enough to keep latency low.
const BATCH: usize = 64;
/// How often a queue waiting for a read looks again even if no completion woke it (one always
/// should: this only bounds the cost of a missed wake-up).
const READ_RECHECK: Duration = Duration::from_secs(1);

pub(super) fn spawn(
    handle: QueueRef,
    rx: mpsc::Receiver<QueueCmd>,
    settings: QueueSettings,
    links: QueueLinks,
    restored: RecoveredQueue,
) {
    tokio::spawn(run(handle, rx, settings, links, restored));
}

/// What applying a command did.
enum Applied {
    Done,
    /// The command needs the message being read off the task (a `basic.get` when the head is
    /// empty): it is applied again, before anything after it, once the read is done.
    WaitForRead(QueueCmd),
    Stop,
}

/// A get's answer and where it goes.
/// An answer sent once the pass's log records are appended (see `finish_pass`).
enum AfterJournal {
    Got(oneshot::Sender<Option<GetOk>>, Option<GetOk>),
    Flushed(oneshot::Sender<bool>),
}

struct Task {
    handle: QueueRef,
    state: QueueState,
    outbox: Outbox,
    /// Dead letters whose log record waits for their targets' confirms.
    unconfirmed: Unconfirmed,
    /// Routes the queue's dead letters.
    dead_letters: Arc<dyn DeadLetterSink>,
    /// Told when the queue deletes itself; taken when it does.
    on_self_delete: Option<OnSelfDelete>,
    /// The broker's message log, when it has a store: a durable queue journals its persistent
    /// messages there, and every queue pages out what does not fit in memory.
    log: Option<Arc<MessageLog>>,
    /// A replicated quorum queue's group: its journal goes there too.
    replica: Option<Arc<dyn Replicate>>,
    /// Answers to gets and flushes, sent once the pass's log records are appended (see
    /// `finish_pass`).
    after_journal: Vec<AfterJournal>,
}

async fn run(
    handle: QueueRef,
    mut rx: mpsc::Receiver<QueueCmd>,
    settings: QueueSettings,
    links: QueueLinks,
    restored: RecoveredQueue,
) {
    let QueueLinks { log, dead_letters, on_self_delete, replica } = links;
    let restored = match (&replica, &log) {
        (Some(replica), Some(log)) => match replica.take_over(handle.id, Arc::clone(log)).await {
            Ok(restored) => restored,
            Err(error) => {
                tracing::error!(queue = handle.name(), %error, "taking the replicated queue over failed");
                return;
            }
        },
        _ => restored,
    };
    let Some(state) = start_state(&handle, settings, log.as_ref(), restored).await else {
        return;
    };
    let reads = state.read_signal();
    let on_self_delete = Some(on_self_delete);
    // Where the targets of this queue's dead letters confirm them (the id is the queue's own:
    // nothing but this task reads it).
    let (confirm_sink, mut confirms) = SessionSink::new(handle.id, 0);
    let outbox = Outbox::new(ConfirmTo { session: confirm_sink, channel: 0 });
    let unconfirmed = Unconfirmed::default();
    let mut task = Task {
        handle,
        state,
        outbox,
        unconfirmed,
        dead_letters,
        on_self_delete,
        log,
        replica,
        after_journal: Vec::new(),
    };
    let mut confirmed = Vec::new();
    let mut received = Vec::with_capacity(BATCH);
    // Commands taken from the mailbox and not yet applied: the rest of a batch while the queue
    // waits for a read (see `Applied::WaitForRead`). Never more than one batch.
    let mut commands: VecDeque<QueueCmd> = VecDeque::with_capacity(BATCH);
    let mut blocked: Option<QueueRef> = None;
    let mut waiting_for_read = false;
    'outer: loop {
        if let (true, Some(reads)) = (waiting_for_read, &reads) {
            // Nothing is taken from the mailbox meanwhile: publishers wait, as for a slow queue.
            // (The completion also puts a `Resume` in the mailbox, which may be full.)
            tokio::select! {
                () = reads.notified() => {}
                () = tokio::time::sleep(READ_RECHECK) => {}
            }
        } else {
            let deadline = task.state.next_deadline().map(|at| {
                let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                tokio::time::Instant::now() + Duration::from_millis(wait)
            });
            tokio::select! {
                count = rx.recv_many(&mut received, BATCH) => {
                    if count == 0 {
                        break;
                    }
                }
                () = sleep_until(deadline), if deadline.is_some() => {}
                () = wait_for_room(blocked.as_ref()), if blocked.is_some() => {}
                _ = confirms.recv_many(&mut confirmed, BATCH) => {}
            }
            commands.extend(received.drain(..));
        }
        for event in confirmed.drain(..) {
            if let SessionEvent::Confirms { accepted, refused, .. } = event {
                task.answers(accepted, true);
                task.answers(refused, false);
            }
        }
        task.state.set_now(now_ms());
        let placed = std::mem::take(&mut *task.handle.placements.lock());
        task.state.placed(placed);
        waiting_for_read = task.state.make_owed_drops();
        while !waiting_for_read && let Some(command) = commands.pop_front() {
            match apply(&mut task.state, &mut task.after_journal, command) {
                Applied::Done => waiting_for_read = task.state.owes_drops(),
                Applied::WaitForRead(command) => {
                    commands.push_front(command);
                    waiting_for_read = true;
                }
                Applied::Stop => {
                    task.finish_pass();
                    break 'outer;
                }
            }
        }
        if waiting_for_read {
            // The pass goes on once the read is done: what it produced so far (confirmations,
            // dead letters, events) is held so that nothing goes out ahead of the answer or
            // the drops being waited for.
            continue;
        }
        if task.state.should_auto_delete() || task.state.has_expired() {
            task.self_delete();
            task.state.cancel_all_consumers();
            task.finish_pass();
            break;
        }
        task.state.release_due();
        task.state.expire(false);
        task.state.dispatch();
        task.state.expire(true);
        task.state.refresh_refusing();
        task.state.refresh_flow();
        blocked = task.finish_pass();
    }
    // Publishers held back wait no more: what they send now finds the queue gone.
    task.handle.admission.set(false, false);
    drain_after_stop(&mut rx);
    task.drop_spills();
    // Dead letters still waiting for room in their targets are delivered after the queue is
    // gone: they left it before it was deleted.
    let mut outbox = task.outbox;
    if let Some(mut target) = outbox.pump(&mut Vec::new()) {
        tokio::spawn(async move {
            loop {
                room_in(&target).await;
                match outbox.pump(&mut Vec::new()) {
                    Some(next) => target = next,
                    None => break,
                }
            }
        });
    }
    tracing::debug!(queue = task.handle.name(), "queue stopped");
}

/// The queue's state at start. A durable queue with messages recovered from the log reads its
/// head back (and writes the rest's paged index) on the blocking pool, not on a runtime
/// worker; commands wait in the mailbox meanwhile, so the first of them sees every recovered
/// message, in order. `None` if that restore panicked (the queue does not start).
async fn start_state(
    handle: &QueueRef,
    settings: QueueSettings,
    log: Option<&Arc<MessageLog>>,
    restored: RecoveredQueue,
) -> Option<QueueState> {
    let mut state = QueueState::new(Arc::clone(handle), settings, now_ms());
    let Some(log) = log else {
        return Some(state);
    };
    state.enable_paging(log.reader().clone());
    if !handle.config.durable {
        return Some(state);
    }
    if restored.is_empty() {
        state.enable_journal(restored);
        return Some(state);
    }
    let restoring = tokio::task::spawn_blocking(move || {
        state.enable_journal(restored);
        state
    });
    match restoring.await {
        Ok(state) => Some(state),
        Err(error) => {
            tracing::error!(queue = handle.name(), %error, "restoring the queue's messages failed");
            None
        }
    }
}

impl Task {
    /// Sends the pass's dead letters, then its events; returns the target queue the outbox
    /// waits for. Dead letters first, as RabbitMQ's queue process sends them before the
    /// publisher hears of the publish that caused them: a client that publishes to a second
    /// queue once confirmed finds its dead letters behind this queue's (conformance case
    /// `dlx.policy.max_length_min` saw them overtaken when the machine was busy).
    fn finish_pass(&mut self) -> Option<QueueRef> {
        self.dead_letter();
        self.report_held();
        self.pass_on_refused_dead_letters();
        self.forward_at_least_once();
        let mut gone = Vec::new();
        let blocked = self.outbox.pump(&mut gone);
        // A deleted target never confirms: a crash-safe forward is done with it, an
        // at-least-once letter waits for a route that exists.
        self.answers(gone, false);
        for (session, event) in self.state.take_outbox() {
            session.send(event);
        }
        self.write_journal();
        // After the records: what a client does with a message it got (a move into another
        // queue, say) reaches the log after the message's own enqueue.
        for answer in self.after_journal.drain(..) {
            match answer {
                AfterJournal::Got(reply, got) => {
                    let _ = reply.send(got);
                }
                AfterJournal::Flushed(reply) => {
                    let _ = reply.send(self.outbox.is_empty() && self.unconfirmed.is_empty());
                }
            }
        }
        self.state.set_expiry_room(self.outbox.room());
        let pending = self.state.dead_letters_pending();
        self.handle.dead_letters_pending.store(pending, std::sync::atomic::Ordering::Relaxed);
        let replica_behind = self.replica.as_ref().is_some_and(|r| r.is_behind());
        self.handle.admission.set(self.state.held_for_flow() || replica_behind, self.state.holds_for_guarantee());
        let oldest = self.state.oldest_ready_at().unwrap_or(0);
        self.handle.oldest_ready_at.store(oldest, std::sync::atomic::Ordering::Relaxed);
        self.handle.gauges.store(self.state.gauges());
        self.state.note_utilisation();
        blocked
    }

    /// Hands the pass's log records to the store in one append (and, for a replicated queue,
    /// to its group); the confirmations held back for them go out once the log has synced them
    /// — for a replicated queue, once its group committed them — as nacks if it cannot, and the
    /// places of messages waiting to leave memory come back to the queue.
    fn write_journal(&mut self) {
        let (records, confirms) = self.state.take_journal();
        if records.is_empty() && confirms.is_empty() {
            return;
        }
        let Some(log) = &self.log else {
            return;
        };
        let replicated: Vec<Record> = match &self.replica {
            Some(_) => records
                .iter()
                .filter(|r| !matches!(r, Record::Spill { .. } | Record::Released { .. }))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let confirm = (!confirms.is_empty()).then(|| {
            Box::new(move |synced: bool| {
                for (session, event) in confirms {
                    session.send(match (synced, event) {
                        (false, SessionEvent::Confirms { channel, mut accepted, mut refused }) => {
                            refused.append(&mut accepted);
                            SessionEvent::Confirms { channel, accepted, refused }
                        }
                        (_, event) => event,
                    });
                }
            }) as Replicated
        });
        // A replicated batch's confirmations wait for its group only: the queue is restored
        // from the group, never from this node's log (which then only pages its messages), and
        // the group commits what a majority of its members fsynced.
        let mut logged = confirm;
        if let Some(replica) = self.replica.as_ref().filter(|_| !replicated.is_empty()) {
            // Held back for the group: each commit lets the task look again.
            let wake = replica.is_behind().then(|| Arc::clone(&self.handle));
            let committed = logged.take();
            replica.replicate(
                encode_batch(&replicated),
                Box::new(move |ok| {
                    if let Some(committed) = committed {
                        committed(ok);
                    }
                    if let Some(queue) = wake {
                        queue.resume();
                    }
                }),
            );
        }
        let place_to = self.state.wants_places().then(|| Arc::clone(&self.handle));
        let done: Option<Completion> = (logged.is_some() || place_to.is_some()).then(|| {
            let logged = logged.take();
            Box::new(move |result: Result<Vec<Placed>, LogFailure>| {
                let synced = result.is_ok();
                if let (Some(queue), Ok(placed)) = (place_to, result) {
                    queue.placed(placed);
                }
                if let Some(logged) = logged {
                    logged(synced);
                }
            }) as Completion
        });
        log.append(records, done);
    }

    fn dead_letter(&mut self) {
        let discarded = self.state.take_discarded();
        if discarded.is_empty() {
            return;
        }
        let dead_letterer = dead_letterer(&self.handle, self.state.settings(), self.state.now());
        let mut remove_now = Vec::new();
        for discard in discarded {
            let routed = match dead_letterer.dead_letter(&*self.dead_letters, &discard.message, discard.reason) {
                Outcome::Routed(message, targets) => Some((message, targets)),
                Outcome::Discarded => None,
                Outcome::Dropped(copy, why) => self
                    .dead_letters
                    .dropped(self.handle.name(), why)
                    .map(|fallback| (Arc::new(marked_dropped(*copy, why)), vec![fallback])),
            };
            // A persisted message's record stays until every target has its copy on disk;
            // anything else leaves the log now.
            let wait = discard.removal.filter(|r| r.persisted && routed.is_some());
            if wait.is_none() {
                remove_now.extend(discard.removal);
            }
            if let Some((message, targets)) = routed {
                let confirm = wait.map(|removal| self.unconfirmed.track(removal, targets.len()));
                self.outbox.push(Forward::new(message, targets, confirm));
            }
        }
        for removal in remove_now {
            self.state.remove_from_log(removal);
        }
    }

    /// Passes the dead letters this queue refused (full, `reject-publish`) on to the fallback
    /// queue, confirmed to their source; without a fallback (or when this is it) the source
    /// hears of the refusal, as in RabbitMQ.
    fn pass_on_refused_dead_letters(&mut self) {
        for refused in self.state.take_refused_dead_letters() {
            let died_in =
                refused.message.broker.deaths.as_deref().map_or(self.handle.name(), |h| h.last.queue.as_str());
            let fallback = self.dead_letters.dropped(died_in, DropReason::TargetFull);
            match fallback.filter(|f| f.id != self.handle.id) {
                Some(fallback) => {
                    let copy = marked_dropped(Message::clone(&refused.message), DropReason::TargetFull);
                    let (reply_to, confirm) = refused.confirm.unzip();
                    let mut forward = Forward::new(Arc::new(copy), vec![fallback], confirm);
                    forward.reply_to = reply_to;
                    self.outbox.push(forward);
                }
                None => {
                    if let Some((to, number)) = refused.confirm {
                        let refusal =
                            SessionEvent::Confirms { channel: to.channel, accepted: Vec::new(), refused: vec![number] };
                        to.session.send(refusal);
                    }
                }
            }
        }
    }

    /// Reports the pass's at-least-once deaths to the dead-letter event stream.
    fn report_held(&mut self) {
        let held = self.state.take_held();
        if !held.is_empty() {
            dead_letterer(&self.handle, self.state.settings(), self.state.now())
                .report_held(&*self.dead_letters, &held);
        }
    }

    /// Targets answered for the copies `numbers` (`accepted`, or refused / gone). A
    /// crash-safe forward counts any answer: the log records of messages all whose targets
    /// answered are removed in this pass. An at-least-once letter leaves only once every
    /// target accepted it.
    fn answers(&mut self, numbers: Vec<u64>, accepted: bool) {
        let (at_least_once, crash_safe): (Vec<u64>, Vec<u64>) =
            numbers.into_iter().partition(|n| n & DLX_NUMBER_BIT != 0);
        for number in at_least_once {
            self.state.dlx_answered(number, accepted);
        }
        for removal in self.unconfirmed.answered(crash_safe) {
            self.state.remove_from_log(removal);
        }
    }

    /// Forwards the at-least-once dead letters that are due, one copy per target that does
    /// not have it yet, each with its own confirm number.
    fn forward_at_least_once(&mut self) {
        let due = self.state.dlx_due();
        if due.is_empty() {
            return;
        }
        // A copy of the settings: the loop below also changes the state they belong to.
        let settings = self.state.settings().clone();
        let dead_letterer = dead_letterer(&self.handle, &settings, self.state.now());
        for letter in due {
            // A letter that waited parked makes its copy again with the death time of the first.
            let copied_at = letter.copied_at.unwrap_or(dead_letterer.at);
            let copy =
                letter.copy.or_else(|| dead_letterer.copy_at(&letter.message, letter.reason, copied_at).map(Arc::new));
            let targets = copy.as_ref().map_or_else(Vec::new, |copy| {
                let mut targets = dead_letterer.route(&*self.dead_letters, copy, letter.reason);
                targets.retain(|t| !letter.confirmed.contains(&t.id));
                targets
            });
            let Some(copy) = copy.filter(|_| !targets.is_empty()) else {
                self.state.dlx_unroutable(letter.id);
                continue;
            };
            for target in targets {
                if let Some(number) = self.state.dlx_sent(letter.id, &copy, copied_at, target.id) {
                    self.outbox.push(Forward::new(Arc::clone(&copy), vec![target], Some(number)));
                }
            }
        }
    }

    /// A non-durable queue that spilled messages is gone: its log records are garbage. (A
    /// durable queue's are dropped when it is deleted, not when the broker stops.)
    fn drop_spills(&self) {
        let Some(log) = &self.log else {
            return;
        };
        let mut drops = Vec::new();
        if !self.handle.config.durable && self.state.spilled_any() {
            drops.push(Record::DropQueue { queue: self.handle.id });
        }
        if !self.handle.config.durable && self.state.spilled_letters() {
            drops.push(Record::DropQueue { queue: self.handle.id | LETTER_LOG_KEY });
        }
        if !drops.is_empty() {
            log.append(drops, None);
        }
    }

    fn self_delete(&mut self) {
        if let Some(on_self_delete) = self.on_self_delete.take() {
            on_self_delete(&self.handle);
        }
    }
}

/// What dead-lettering from this queue needs, with its current settings, for letters that die
/// at `at` (the pass's time).
fn dead_letterer<'a>(handle: &'a QueueRef, settings: &'a QueueSettings, at: i64) -> DeadLetterer<'a> {
    DeadLetterer {
        queue: &handle.config.name,
        counts: &handle.dead_lettered,
        queue_type: handle.config.queue_type,
        exchange: settings.dead_letter_exchange.as_deref(),
        routing_key: settings.dead_letter_routing_key.as_deref(),
        at,
    }
}

/// Applies one command; a get's answer goes to `gets`, to be sent after the pass's records.
fn apply(state: &mut QueueState, after_journal: &mut Vec<AfterJournal>, command: QueueCmd) -> Applied {
    match command {
        QueueCmd::Publish { items, confirm_to } => state.publish(items, confirm_to),
        QueueCmd::PublishMoved { items, from, confirm_to } => state.publish_moved(items, &from, confirm_to),
        QueueCmd::PublishNumbered { items, confirm_to, numbers } => {
            let _ = numbers.send(state.publish_numbered(items, confirm_to));
        }
        QueueCmd::Consume(spec, reply) => {
            let _ = reply.send(state.consume(*spec));
        }
        QueueCmd::Cancel(consumer, reply) => {
            // Deliveries made so far are flushed before the reply so the channel sees them
            // before it answers cancel-ok.
            let existed = state.cancel(consumer);
            for (session, event) in state.take_outbox() {
                session.send(event);
            }
            let _ = reply.send(existed);
        }
        QueueCmd::Settle { seqs, how } => state.settle(&seqs, how),
        QueueCmd::SettleModified { seqs, failed, annotations } => state.settle_modified(&seqs, failed, &annotations),
        QueueCmd::SettleRefused { seqs, how, cause } => state.settle_refused(&seqs, how, &cause),
        QueueCmd::Get { owner, no_ack, reply } => match state.try_get(owner, no_ack) {
            Ok(got) => after_journal.push(AfterJournal::Got(reply, got)),
            Err(ReadPending) => return Applied::WaitForRead(QueueCmd::Get { owner, no_ack, reply }),
        },
        QueueCmd::Flush(reply) => after_journal.push(AfterJournal::Flushed(reply)),
        QueueCmd::Purge(reply) => match state.try_purge() {
            Ok(count) => {
                let _ = reply.send(count);
            }
            Err(ReadPending) => return Applied::WaitForRead(QueueCmd::Purge(reply)),
        },
        QueueCmd::Browse { request, reply } => {
            let _ = reply.send(state.browse(request));
        }
        QueueCmd::Remove { seqs, reply } => {
            let _ = reply.send(state.remove(&seqs));
        }
        QueueCmd::RemoveChecked { run, id, found, reply } => {
            let _ = reply.send(state.remove_checked(run, id, found));
        }
        QueueCmd::Stats(reply) => {
            let _ = reply.send(state.stats());
        }
        QueueCmd::Consumers(reply) => {
            let _ = reply.send(state.consumer_reports());
        }
        QueueCmd::Declared(reply) => {
            state.touch();
            let _ = reply.send(state.stats());
        }
        QueueCmd::Settings(settings) => state.apply_settings(settings),
        QueueCmd::OwnerClosed(owner) => state.owner_closed(owner),
        QueueCmd::Delete { if_unused, if_empty, reply } => match state.check_delete(if_unused, if_empty) {
            Ok(count) => {
                state.cancel_all_consumers();
                let _ = reply.send(Ok(count));
                return Applied::Stop;
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        },
        QueueCmd::Resume => {}
        QueueCmd::TopologyChanged => state.topology_changed(),
        QueueCmd::Credit(grant) => state.credit(grant),
    }
    Applied::Done
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn wait_for_room(target: Option<&QueueRef>) {
    match target {
        Some(target) => room_in(target).await,
        None => std::future::pending().await,
    }
}

/// After the queue stopped, answer what is still in the mailbox: publishes waiting for a
/// confirmation are confirmed (RabbitMQ confirms messages whose queue went away normally),
/// moved messages are refused (they stay in their source), so are numbered ones (their caller
/// was promised a place in this queue), and every other caller sees its reply channel close.
fn drain_after_stop(rx: &mut mpsc::Receiver<QueueCmd>) {
    rx.close();
    while let Ok(command) = rx.try_recv() {
        let (items, to, refuse) = match command {
            QueueCmd::Publish { items, confirm_to: Some(to) } => (items, to, false),
            QueueCmd::PublishMoved { items, confirm_to, .. } | QueueCmd::PublishNumbered { items, confirm_to, .. } => {
                (items, confirm_to, true)
            }
            _ => continue,
        };
        let numbers: Vec<u64> = items.iter().filter_map(|i| i.confirm).collect();
        if !numbers.is_empty() {
            let (accepted, refused) = if refuse { (Vec::new(), numbers) } else { (numbers, Vec::new()) };
            to.session.send(crate::session::SessionEvent::Confirms { channel: to.channel, accepted, refused });
        }
    }
}

#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod tests;
