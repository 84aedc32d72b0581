//! A queue's ready messages: one [`Level`] per run its [`Order`] keeps — one for a FIFO queue,
//! one per priority for a priority queue, a quorum queue's normal, high and returned runs —
//! each in sequence order with its own head and pager. Dispatch, gets, expiry and drop-head
//! take the message the order says comes next; length limits count all runs.

use charon_store::segment_log::{LogReader, Placed, RecoveredMessage, RecoveredQueue};

use super::browse::Plan;
use super::entry::Entry;
use super::handle::QueueRef;
use super::journal::Journal;
use super::level::Level;
use super::limits::Size;
use super::order::Order;
use super::paging::packed::PagedEntry;
use super::paging::{Pager, Removed, Wake, packed_places};

/// The ready messages of a queue.
#[derive(Debug)]
pub(super) struct Ready {
    levels: Vec<Level>,
    order: Order,
    /// What a run's pager needs, once the broker has a log. A priority queue's runs get their
    /// pager when they first get a message (most priorities are never used).
    paging: Option<Paging>,
    /// Messages a purge that waits for paged runs to be read back has removed so far.
    taken: usize,
}

/// What every pager of a queue shares.
#[derive(Debug)]
struct Paging {
    reader: LogReader,
    wake: Wake,
    queue_id: u64,
}

impl Ready {
    /// No messages yet, handed out in `order`.
    pub(super) fn new(order: Order) -> Self {
        Self { levels: (0..order.runs()).map(|_| Level::default()).collect(), order, paging: None, taken: 0 }
    }

    /// Turns paging on: the broker has a log that long queues can keep their messages in.
    pub(super) fn enable_paging(&mut self, reader: LogReader, queue: &QueueRef) {
        self.paging = Some(Paging { reader, wake: Wake::new(queue), queue_id: queue.id });
        if self.levels.len() == 1 {
            self.level_mut(0);
        }
    }

    /// Ready messages in all runs.
    pub(super) fn len(&self) -> usize {
        self.levels.iter().map(Level::len).sum()
    }

    /// Ready messages and their bytes, as length limits count them.
    pub(super) fn size(&self) -> Size {
        let bytes = self.levels.iter().map(Level::bytes).sum();
        Size { count: u64::try_from(self.len()).unwrap_or(u64::MAX), bytes }
    }

    /// The ready messages held whole in memory (the runs' heads), and their body bytes.
    pub(super) fn resident(&self) -> Size {
        self.levels
            .iter()
            .map(Level::resident)
            .fold(Size::default(), |a, b| Size { count: a.count + b.count, bytes: a.bytes + b.bytes })
    }

    /// Adds a new ready message at the tail of its run, whose head holds up to `resident`
    /// messages (see [`Level::push`]).
    pub(super) fn push(&mut self, entry: Entry, resident: usize, journal: &mut Journal) {
        let run = self.order.run_of(entry.message.properties().priority);
        if let Some(level) = self.level_mut(run) {
            level.push(entry, resident, journal);
        }
    }

    /// Puts a message that came back from a consumer into its run, at its sequence position.
    pub(super) fn insert(&mut self, entry: Entry) {
        let run = self.order.returned_run_of(entry.message.properties().priority);
        if let Some(level) = self.levels.get_mut(run) {
            level.insert(entry);
        }
    }

    /// Moves a delayed message that is due into its run where its sequence number puts it: at
    /// the tail when no later message joined the run meanwhile; else into the head when nothing
    /// paged comes before it; else, in a quorum queue, into the returned run (it goes out
    /// before later messages, as Zaqar hands out due messages in posting order). A classic
    /// queue whose paged messages come before it cannot take it yet without breaking its
    /// sequence order: it comes back, to be tried again once the head has caught up.
    pub(super) fn insert_due(&mut self, entry: Entry, resident: usize, journal: &mut Journal) -> Result<(), Entry> {
        let priority = entry.message.properties().priority;
        let run = self.order.run_of(priority);
        let Some(level) = self.level_mut(run) else { return Err(entry) };
        if level.fits_at_tail(entry.seq) {
            level.push(entry, resident, journal);
            return Ok(());
        }
        if level.fits_in_head(entry.seq) {
            level.insert(entry);
            return Ok(());
        }
        let returned = self.order.returned_run_of(priority);
        match self.levels.get_mut(returned) {
            Some(level) if returned != run => {
                level.insert(entry);
                Ok(())
            }
            _ => Err(entry),
        }
    }

    /// Takes the next ready message (see [`Level::pop`]): `None` when there is none, or while
    /// the run it comes from is being read back ([`Self::awaiting_read`]) or waits to retry a
    /// failed read.
    pub(super) fn pop(&mut self, now: i64, journal: &mut Journal) -> Option<Entry> {
        loop {
            let run = self.next_run()?;
            let level = self.levels.get_mut(run)?;
            if let Some(entry) = level.pop(now, journal) {
                self.order.took(run);
                return Some(entry);
            }
            if level.len() > 0 {
                return None;
            }
            // The run's last messages could not be read back and were dropped: the next run.
        }
    }

    /// Takes the finished reads of every run (see [`Level::collect_reads`]).
    pub(super) fn collect_reads(&mut self, now: i64, journal: &mut Journal) {
        for level in &mut self.levels {
            level.collect_reads(now, journal);
        }
    }

    /// The next ready message, without taking it (see [`Self::pop`]).
    pub(super) fn head(&mut self, now: i64, journal: &mut Journal) -> Option<&Entry> {
        let mut run = self.next_run()?;
        // A run whose last messages could not be read back is empty now: the next one.
        while self.levels.get_mut(run)?.head(now, journal).is_none() && self.levels.get(run)?.len() == 0 {
            run = self.next_run()?;
        }
        self.levels.get_mut(run)?.head(now, journal)
    }

    /// The sequence number of the oldest ready message in any run, when known without reading
    /// it.
    pub(super) fn head_seq(&self) -> Option<u64> {
        self.levels.iter().filter_map(Level::head_seq).min()
    }

    /// Whether the next ready message is being read off the queue task: its run's head is empty
    /// though it has messages, and the read's completion wakes the queue.
    pub(super) fn awaiting_read(&self) -> bool {
        self.next_level().is_some_and(Level::awaiting_read)
    }

    /// Signalled whenever a read made off the queue task is done; `None` without paging.
    pub(super) fn read_signal(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.paging.as_ref().map(|paging| paging.wake.signal())
    }

    /// The TTL deadline of the next ready message (without reading it), or when to read again
    /// after a failed read.
    pub(super) fn head_deadline(&self) -> Option<i64> {
        self.next_level()?.head_deadline()
    }

    /// Removes every ready message, recording each exit; returns how many there were, or
    /// `None` when the rest of a paged run is being read back off the queue task: then call
    /// again once the read is done and the count goes on.
    pub(super) fn take_all(&mut self, journal: &mut Journal) -> Option<usize> {
        let mut all = true;
        for level in &mut self.levels {
            match level.take_all(journal) {
                Some(count) => self.taken += count,
                None => all = false,
            }
        }
        all.then(|| std::mem::take(&mut self.taken))
    }

    /// Plans a page of the ready messages: one run of the plan per level.
    pub(super) fn browse(&self, plan: &mut Plan) {
        for level in &self.levels {
            plan.run(|collector| level.browse(collector));
        }
    }

    /// Removes the ready messages with sequence numbers `seqs` that are at hand, recording
    /// each exit; the index chunks that may hold the others come back in `into` as checks.
    pub(super) fn remove(&mut self, seqs: &[u64], journal: &mut Journal, into: &mut Removed) {
        let mut seqs = seqs.to_vec();
        seqs.sort_unstable();
        seqs.dedup();
        for (run, level) in self.levels.iter_mut().enumerate() {
            level.remove(&seqs, run, journal, into);
        }
    }

    /// Removes what a check of chunk `id` of run `run` found in its index file.
    pub(super) fn remove_checked(
        &mut self,
        run: usize,
        id: u64,
        found: Vec<PagedEntry>,
        journal: &mut Journal,
        into: &mut Removed,
    ) {
        if let Some(level) = self.levels.get_mut(run) {
            level.remove_checked(id, found, journal, into);
        }
    }

    /// Takes the places the log reported: messages waiting for theirs get them, paged messages
    /// compaction moved get their new ones (the log names the message, not its run: every
    /// paged run looks for the moved ones).
    pub(super) fn placed(&mut self, placed: Vec<Placed>) {
        let mut places = packed_places(placed);
        for level in &mut self.levels {
            level.take_places(&mut places);
        }
        for level in &mut self.levels {
            level.relocate(&places);
        }
    }

    /// Whether the log's places of this pass's messages are wanted.
    pub(super) fn wants_places(&self) -> bool {
        self.levels.iter().any(Level::wants_places)
    }

    /// Whether messages were spilled to the log (a non-durable queue drops them when it goes).
    pub(super) fn spilled_any(&self) -> bool {
        self.levels.iter().any(Level::spilled_any)
    }

    /// Restores messages the log recovered, each into its run by the priority its record
    /// kept (see [`Level::restore`]).
    pub(super) fn restore(&mut self, restored: RecoveredQueue, journal: &mut Journal, queue_name: &str) {
        if self.levels.len() == 1 {
            if let Some(level) = self.level_mut(0) {
                level.restore(restored, journal, queue_name);
            }
            return;
        }
        let mut runs: Vec<Vec<RecoveredMessage>> = (0..self.levels.len()).map(|_| Vec::new()).collect();
        for message in restored {
            let run = self.order.run_of(Some(message.priority));
            if let Some(messages) = runs.get_mut(run) {
                messages.push(message);
            }
        }
        for (run, messages) in runs.into_iter().enumerate().filter(|(_, messages)| !messages.is_empty()) {
            if let Some(level) = self.level_mut(run) {
                level.restore(RecoveredQueue::from(messages), journal, queue_name);
            }
        }
    }

    /// The run the next message comes from.
    fn next_run(&self) -> Option<usize> {
        let levels = &self.levels;
        self.order.next(|run| levels.get(run).is_some_and(|level| level.len() > 0))
    }

    fn next_level(&self) -> Option<&Level> {
        self.levels.get(self.next_run()?)
    }

    /// Run `run`, given its pager first if paging is on and it has none yet.
    fn level_mut(&mut self, run: usize) -> Option<&mut Level> {
        let level = self.levels.get_mut(run)?;
        if let Some(paging) = &self.paging
            && !level.pages()
        {
            let name = if run == 0 { paging.queue_id.to_string() } else { format!("{}-{run}", paging.queue_id) };
            level.page_with(Pager::new(paging.reader.clone(), paging.wake.clone(), name));
        }
        Some(level)
    }

    /// The three runs' lengths, summed over the levels: head, paged, waiting for their places.
    #[cfg(test)]
    pub(super) fn runs(&self) -> (usize, usize, usize) {
        self.levels.iter().map(Level::runs).fold((0, 0, 0), |(h, p, i), (a, b, c)| (h + a, p + b, i + c))
    }

    /// The messages in the heads, the highest run first.
    #[cfg(test)]
    pub(super) fn head_entries(&self) -> impl Iterator<Item = &Entry> {
        self.levels.iter().rev().flat_map(Level::head_entries)
    }

    /// Whether a page is being read off the queue task.
    #[cfg(test)]
    pub(super) fn reading(&self) -> bool {
        self.levels.iter().any(Level::reading)
    }

    /// Bytes of all ready messages.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> u64 {
        self.size().bytes
    }
}
