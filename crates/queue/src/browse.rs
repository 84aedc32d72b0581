//! Reading a queue's messages without taking them: the dead-letter browser, redrive dry runs and
//! Zaqar's message listing page through a queue by sequence number.
//!
//! The queue task only plans a page: it walks its runs in order (the heads, the paged runs with
//! the chunks of their index files, the messages waiting for their places, and, when asked,
//! the unacknowledged deliveries) and notes where each candidate is — whole in memory, at a
//! place in the log, or in a chunk of a paged run's index file. The plan is then resolved off
//! the task ([`Plan::resolve`], on the blocking pool): chunks are read from the index file,
//! messages from the log. A page of a queue of ten million messages costs a page of reads,
//! never the queue in memory.
//!
//! A page is a snapshot: a message taken or moved by compaction while its page is being read is
//! left out of it (the next page goes on from the cursor, so nothing is repeated).

use std::fs::File;
use std::sync::Arc;

use charon_model::Message;
use charon_store::codec::decode_message;
use charon_store::segment_log::{LogReader, Place};

use super::entry::Entry;
use super::paging::packed::PagedEntry;

/// Which messages a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrowseRequest {
    /// Only messages with a sequence number above this (the previous page's last, oldest first).
    pub after: Option<u64>,
    /// Only messages with a sequence number below this (the previous page's last, newest first).
    pub before: Option<u64>,
    /// Newest first instead of oldest first.
    pub newest_first: bool,
    /// At most this many messages.
    pub limit: usize,
    /// Also the messages delivered to a consumer and not settled yet (Zaqar's claimed ones).
    pub include_unacked: bool,
    /// Also the delayed messages, whose "not before" time has not come (Zaqar's
    /// `include_delayed`); they come marked [`BrowsedMessage::delayed`].
    pub include_delayed: bool,
}

impl BrowseRequest {
    /// The first `limit` messages, oldest first, ready ones only.
    #[must_use]
    pub fn oldest(limit: usize) -> Self {
        Self { after: None, before: None, newest_first: false, limit, include_unacked: false, include_delayed: false }
    }

    fn admits(&self, seq: u64) -> bool {
        self.after.is_none_or(|after| seq > after) && self.before.is_none_or(|before| seq < before)
    }

    /// Whether every sequence number from `first` to `last` is in the window.
    fn admits_all(&self, first: u64, last: u64) -> bool {
        self.admits(first) && self.admits(last)
    }

    /// Whether any sequence number from `first` to `last` can be in the window.
    fn overlaps(&self, first: u64, last: u64) -> bool {
        self.after.is_none_or(|after| last > after) && self.before.is_none_or(|before| first < before)
    }
}

/// One message of a page.
#[derive(Clone, Debug)]
pub struct BrowsedMessage {
    /// Its sequence number in the queue: stable while it stays there, the id that
    /// [`super::QueueHandle::remove`] takes and the cursor of the next page.
    pub seq: u64,
    /// The message as stored (death history, annotations and all).
    pub message: Arc<Message>,
    /// Whether it was delivered before and came back.
    pub redelivered: bool,
    /// Times it came back from a consumer (as the queue counts them for its delivery limit).
    pub returned: u32,
    /// Whether a consumer holds it unsettled right now.
    pub unacked: bool,
    /// Whether it is delayed: not deliverable before its "not before" time, which has not come.
    pub delayed: bool,
}

/// A page of a queue's messages.
#[derive(Debug, Default)]
pub struct BrowsePage {
    /// The messages, in the order asked for.
    pub items: Vec<BrowsedMessage>,
    /// Whether more messages are in the window after the last one.
    pub has_more: bool,
}

/// Where a candidate for the page is.
#[derive(Debug)]
enum Source {
    /// Whole in memory.
    Whole(BrowsedMessage),
    /// Only in the log.
    Logged { seq: u64, place: Place },
    /// Somewhere among `count` entries of a paged run's index file from `slot`: the chunk's
    /// messages removed while it was on disk are in `removed`.
    Chunk { file: Arc<File>, slot: u64, count: usize, removed: Vec<u64> },
}

/// Gathers the candidates of one run of the queue, in the order asked for, up to the limit.
#[derive(Debug)]
pub(super) struct Collector {
    request: BrowseRequest,
    sources: Vec<Source>,
    /// Candidates certainly in the window so far (a chunk the window cuts counts for none).
    found: usize,
    /// Whether the run has candidates past the last one gathered.
    more: bool,
}

impl Collector {
    fn new(request: BrowseRequest) -> Self {
        Self { request, sources: Vec::new(), found: 0, more: false }
    }

    /// Whether the run is walked newest first.
    pub(super) fn newest_first(&self) -> bool {
        self.request.newest_first
    }

    /// Whether the page is full and another candidate was seen: the walk can stop.
    pub(super) fn done(&self) -> bool {
        self.more
    }

    /// Whether the walk has gone past the window in its direction at `seq`: nothing later in
    /// the walk can be in it.
    fn past(&self, seq: u64) -> bool {
        if self.request.newest_first {
            self.request.after.is_some_and(|after| seq <= after)
        } else {
            self.request.before.is_some_and(|before| seq >= before)
        }
    }

    /// Takes one more candidate unless the page is full (then notes that there is more).
    fn take(&mut self) -> bool {
        if self.found >= self.request.limit {
            self.more = true;
            return false;
        }
        true
    }

    /// A message whole in memory.
    pub(super) fn entry(&mut self, entry: &Entry, unacked: bool) {
        self.whole(entry, unacked, false);
    }

    /// A delayed message (whole in memory).
    pub(super) fn delayed(&mut self, entry: &Entry) {
        self.whole(entry, false, true);
    }

    fn whole(&mut self, entry: &Entry, unacked: bool, delayed: bool) {
        if !self.request.admits(entry.seq) || self.past(entry.seq) || !self.take() {
            return;
        }
        self.found += 1;
        self.sources.push(Source::Whole(BrowsedMessage {
            seq: entry.seq,
            message: Arc::clone(&entry.message),
            redelivered: entry.redelivered,
            returned: entry.returned,
            unacked,
            delayed,
        }));
    }

    /// A message only in the log, its entry at hand.
    pub(super) fn paged(&mut self, paged: &PagedEntry) {
        if !self.request.admits(paged.seq) || !self.take() {
            return;
        }
        self.found += 1;
        self.sources.push(Source::Logged { seq: paged.seq, place: paged.place() });
    }

    /// A chunk of `count` entries, sequence numbers `first` to `last`, in `file` from `slot`;
    /// `removed`: those of them taken out while the chunk was on disk.
    pub(super) fn chunk(&mut self, file: &Arc<File>, slot: u64, range: (u64, u64), count: usize, removed: Vec<u64>) {
        let (first, last) = range;
        if !self.request.overlaps(first, last) || !self.take() {
            return;
        }
        if self.request.admits_all(first, last) {
            self.found += count.saturating_sub(removed.len());
        }
        self.sources.push(Source::Chunk { file: Arc::clone(file), slot, count, removed });
    }
}

/// A page planned by the queue task, to be resolved off it.
#[derive(Debug)]
pub(crate) struct Plan {
    request: BrowseRequest,
    runs: Vec<Collector>,
    reader: Option<LogReader>,
    /// Messages numbered below this were recovered after a crash and show as redelivered, as
    /// the queue would deliver them.
    recovered_before: u64,
}

impl Plan {
    /// An empty plan for `request`; `reader` reads what its runs have in the log; messages
    /// numbered below `recovered_before` show as redelivered.
    pub(super) fn new(request: BrowseRequest, reader: Option<LogReader>, recovered_before: u64) -> Self {
        Self { request, runs: Vec::new(), reader, recovered_before }
    }

    /// Walks one more run of the queue with `walk`, which hands each candidate to the
    /// collector in the run's order (reversed when the collector says newest first).
    pub(super) fn run(&mut self, walk: impl FnOnce(&mut Collector)) {
        let mut collector = Collector::new(self.request);
        walk(&mut collector);
        self.runs.push(collector);
    }

    /// Reads what the plan found (the index chunks and messages on disk), merges the runs in
    /// sequence order and cuts the page at its limit. This reads the disk: run it on the
    /// blocking pool.
    pub(crate) fn resolve(self) -> BrowsePage {
        let Self { request, runs, reader, recovered_before } = self;
        let mut more = false;
        let mut items = Vec::new();
        for run in runs {
            more |= run.more;
            items.extend(resolve_run(&request, run.sources, reader.as_ref()));
        }
        if request.newest_first {
            items.sort_unstable_by_key(|item: &BrowsedMessage| std::cmp::Reverse(item.seq));
        } else {
            items.sort_unstable_by_key(|item: &BrowsedMessage| item.seq);
        }
        if items.len() > request.limit {
            items.truncate(request.limit);
            more = true;
        }
        for item in &mut items {
            item.redelivered |= item.seq < recovered_before;
        }
        BrowsePage { items, has_more: more }
    }
}

/// The messages of one run's sources: chunks expanded into their entries in the window, logged
/// messages read and decoded in one batch. What cannot be read (moved or gone meanwhile) is
/// left out.
fn resolve_run(request: &BrowseRequest, sources: Vec<Source>, reader: Option<&LogReader>) -> Vec<BrowsedMessage> {
    let mut whole = Vec::new();
    let mut logged: Vec<(u64, Place)> = Vec::new();
    for source in sources {
        match source {
            Source::Whole(item) => whole.push(item),
            Source::Logged { seq, place } => logged.push((seq, place)),
            Source::Chunk { file, slot, count, removed } => match super::paging::disk::read_entries(&file, slot, count)
            {
                Ok(entries) => logged.extend(
                    entries
                        .iter()
                        .filter(|e| request.admits(e.seq) && !removed.contains(&e.seq))
                        .map(|e| (e.seq, e.place())),
                ),
                Err(error) => tracing::warn!(%error, "browsing a paged index chunk failed; its messages are left out"),
            },
        }
    }
    let Some(reader) = reader.filter(|_| !logged.is_empty()) else {
        return whole;
    };
    let places: Vec<Place> = logged.iter().map(|&(_, place)| place).collect();
    for ((seq, _), read) in logged.into_iter().zip(reader.read(&places)) {
        let decoded = read.ok().and_then(|payload| decode_message(payload).ok());
        if let Some(message) = decoded {
            whole.push(BrowsedMessage {
                seq,
                message: Arc::new(message),
                redelivered: false,
                returned: 0,
                unacked: false,
                delayed: false,
            });
        }
    }
    whole
}
