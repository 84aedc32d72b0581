//! The paged run of a queue: its entries in sequence order, with only its two ends (and the
//! chunk after the front, read ahead) in memory.
//!
//! New entries gather at the back; a full chunk of them is appended to an index file; the
//! front is read back from the file a chunk at a time as the head takes entries. However long
//! the queue, the run costs a few chunks of memory. Every read and write of the file runs off
//! the queue task ([`disk`](super::disk)): a chunk stays in memory until its write is done, the
//! chunk after the front is read ahead, and while the front itself is still being read the run
//! says so ([`PagedRun::loading`]) and the queue waits for the read's wake-up.
//!
//! Should the file fail (disk full), entries simply stay in memory.

use std::collections::VecDeque;
use std::path::Path;

use super::super::browse::Collector;
use super::disk::{Disk, Done, Op, Waker, apply_moves};
use super::packed::{Packed, PagedEntry};

/// Entries per chunk read or written at once (32 KiB).
const CHUNK: usize = 1024;

/// A full chunk of entries after the front, in the file or on its way there or back.
#[derive(Debug)]
struct Chunk {
    /// Names the chunk in the file's results.
    id: u64,
    /// The index of its first entry in the file.
    slot: u64,
    /// How many entries it has, and the first and last sequence numbers among them.
    count: usize,
    first: u64,
    last: u64,
    /// Its entries while in memory: until its write is done (for good if the write failed),
    /// and once read back.
    entries: Option<Vec<PagedEntry>>,
    /// A write of its entries is running; `dirty`: they were relocated since it started.
    writing: bool,
    dirty: bool,
    /// A read is running; `moves`: relocations made since it started, applied on arrival.
    reading: bool,
    moves: Vec<(u64, Packed)>,
    /// Its entries removed by sequence number while it was away from the front (see
    /// [`PagedRun::remove`]): left out when it becomes the front. The file keeps `count`.
    removed: Vec<u64>,
}

/// What a removal by sequence number came to in the run.
#[derive(Debug, Default)]
pub(super) struct Removal {
    /// The entries removed.
    pub(super) removed: Vec<PagedEntry>,
    /// Chunks whose file may hold some of the sequence numbers: read them off the queue task
    /// and come back with [`PagedRun::remove_checked`].
    pub(super) to_check: Vec<ChunkCheck>,
}

/// A chunk in the index file that may hold some of the sequence numbers to remove.
#[derive(Debug)]
pub(crate) struct ChunkCheck {
    /// The chunk, as [`PagedRun::remove_checked`] takes it back.
    pub(crate) id: u64,
    file: std::sync::Arc<std::fs::File>,
    slot: u64,
    count: usize,
    seqs: Vec<u64>,
}

impl ChunkCheck {
    /// Reads the chunk and keeps the entries asked about. This reads the disk: run it off the
    /// queue task. A chunk that cannot be read yields none (they stay).
    pub(crate) fn found(&self) -> Vec<PagedEntry> {
        match super::disk::read_entries(&self.file, self.slot, self.count) {
            Ok(entries) => entries.into_iter().filter(|e| self.seqs.contains(&e.seq)).collect(),
            Err(error) => {
                tracing::warn!(%error, "reading a paged index chunk to remove messages failed; they stay");
                Vec::new()
            }
        }
    }
}

#[derive(Debug)]
pub(super) struct PagedRun {
    /// The oldest entries; empty while the run is not only while the next chunk is being read.
    front: VecDeque<PagedEntry>,
    /// Full chunks after `front`, in order.
    chunks: VecDeque<Chunk>,
    /// Entries in `chunks`.
    in_chunks: usize,
    /// The newest entries, after the chunks'.
    back: Vec<PagedEntry>,
    disk: Disk,
    /// The file index of the next chunk written, and the id of the next chunk.
    next_slot: u64,
    next_id: u64,
}

impl PagedRun {
    /// A run whose file goes in `dir`; `wake` is called when a read of it is done.
    pub(super) fn new(dir: &Path, name: String, wake: Waker) -> Self {
        Self {
            front: VecDeque::new(),
            chunks: VecDeque::new(),
            in_chunks: 0,
            back: Vec::new(),
            disk: Disk::new(dir, name, wake),
            next_slot: 0,
            next_id: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.front.len() + self.in_chunks + self.back.len()
    }

    /// Hands the run's entries in the browse window to `collector`, in its order: the front,
    /// the chunks (those on disk as chunks of the file, read when the page is resolved), the
    /// back.
    pub(super) fn browse(&self, collector: &mut Collector) {
        let file = self.disk.file();
        let rev = collector.newest_first();
        let chunk = |chunk: &Chunk, collector: &mut Collector| match (&chunk.entries, &file) {
            (Some(entries), _) => {
                for entry in ordered(entries.iter(), rev).filter(|e| !chunk.removed.contains(&e.seq)) {
                    collector.paged(entry);
                }
            }
            (None, Some(file)) => {
                collector.chunk(file, chunk.slot, (chunk.first, chunk.last), chunk.count, chunk.removed.clone());
            }
            (None, None) => {}
        };
        let front = |collector: &mut Collector| ordered(self.front.iter(), rev).for_each(|e| collector.paged(e));
        let back = |collector: &mut Collector| ordered(self.back.iter(), rev).for_each(|e| collector.paged(e));
        if rev {
            back(collector);
            for c in self.chunks.iter().rev() {
                if collector.done() {
                    break;
                }
                chunk(c, collector);
            }
            front(collector);
        } else {
            front(collector);
            for c in self.chunks.iter() {
                if collector.done() {
                    break;
                }
                chunk(c, collector);
            }
            back(collector);
        }
    }

    /// Removes the entries with sequence numbers `seqs` (sorted) that are at hand; the chunks
    /// in the file that may hold others come back to be checked off the queue task.
    pub(super) fn remove(&mut self, seqs: &[u64]) -> Removal {
        self.poll();
        let mut removal = Removal::default();
        for &seq in seqs {
            if let Ok(at) = self.front.binary_search_by_key(&seq, |e| e.seq) {
                removal.removed.extend(self.front.remove(at));
            } else if let Ok(at) = self.back.binary_search_by_key(&seq, |e| e.seq) {
                removal.removed.push(self.back.remove(at));
            } else if let Some(chunk) = self.chunks.iter_mut().find(|c| c.first <= seq && seq <= c.last) {
                if chunk.removed.contains(&seq) {
                    continue;
                }
                match &chunk.entries {
                    Some(entries) => {
                        if let Ok(at) = entries.binary_search_by_key(&seq, |e| e.seq)
                            && let Some(entry) = entries.get(at)
                        {
                            chunk.removed.push(seq);
                            self.in_chunks -= 1;
                            removal.removed.push(*entry);
                        }
                    }
                    None => match removal.to_check.iter_mut().find(|check| check.id == chunk.id) {
                        Some(check) => check.seqs.push(seq),
                        None => {
                            if let Some(file) = self.disk.file() {
                                let (id, slot, count) = (chunk.id, chunk.slot, chunk.count);
                                removal.to_check.push(ChunkCheck { id, file, slot, count, seqs: vec![seq] });
                            }
                        }
                    },
                }
            }
        }
        if self.front.is_empty() {
            self.poll();
        }
        removal
    }

    /// Removes the entries a check of chunk `id` found in the file (`found`): if the chunk is
    /// still away from the front they are left out when it comes back; if it has come to the
    /// front meanwhile they are removed from there. Returns those removed.
    pub(super) fn remove_checked(&mut self, id: u64, found: Vec<PagedEntry>) -> Vec<PagedEntry> {
        self.poll();
        let Some(at) = self.position(id) else {
            let seqs: Vec<u64> = found.iter().map(|e| e.seq).collect();
            return self.remove(&seqs).removed;
        };
        let Some(chunk) = self.chunks.get_mut(at) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for entry in found {
            if !chunk.removed.contains(&entry.seq) {
                chunk.removed.push(entry.seq);
                self.in_chunks -= 1;
                removed.push(entry);
            }
        }
        removed
    }

    pub(super) fn is_empty(&self) -> bool {
        self.front.is_empty() && self.chunks.is_empty() && self.back.is_empty()
    }

    /// Whether the front is being read from the file: entries are there but none is at hand
    /// until the read is done (it wakes the queue).
    pub(super) fn loading(&self) -> bool {
        self.front.is_empty() && !self.chunks.is_empty()
    }

    /// The oldest entry, if at hand.
    pub(super) fn front(&self) -> Option<&PagedEntry> {
        self.front.front()
    }

    /// The oldest entries at hand, up to `n`.
    pub(super) fn first(&self, n: usize) -> impl Iterator<Item = &PagedEntry> {
        self.front.iter().take(n)
    }

    /// Adds the newest entry.
    pub(super) fn push_back(&mut self, entry: PagedEntry) {
        if self.chunks.is_empty() && self.back.is_empty() && self.front.len() < CHUNK {
            self.front.push_back(entry);
            return;
        }
        self.back.push(entry);
        if self.back.len() >= CHUNK {
            self.flush_back();
        }
    }

    /// Takes the oldest entry at hand.
    pub(super) fn pop_front(&mut self) -> Option<PagedEntry> {
        let entry = self.front.pop_front()?;
        if self.front.is_empty() {
            self.poll();
        }
        Some(entry)
    }

    /// Takes the results of the file's operations that are done, refills the front if it is
    /// empty and the next chunk is at hand, and reads the chunk after the front ahead.
    pub(super) fn poll(&mut self) {
        loop {
            self.advance();
            match self.disk.try_done() {
                Some(Done::Written { id, ok }) => self.written(id, ok),
                Some(Done::Read { id, entries }) => self.read(id, entries),
                None => return,
            }
        }
    }

    /// Gives the entries of `moves` (by sequence number) their new places in the log;
    /// sequence numbers the run does not hold are skipped. The moves that fall in a chunk in
    /// the file are applied with one read and one write for the chunk, off the queue task.
    pub(super) fn relocate(&mut self, moves: &mut [(u64, Packed)]) {
        self.poll();
        moves.sort_unstable_by_key(|&(seq, _)| seq);
        let mut rest: &[(u64, Packed)] = moves;
        // The front.
        let split = rest.partition_point(|&(seq, _)| self.front.back().is_some_and(|e| seq <= e.seq));
        let (now, later) = rest.split_at(split);
        for &(seq, place) in now {
            if let Ok(at) = self.front.binary_search_by_key(&seq, |e| e.seq)
                && let Some(entry) = self.front.get_mut(at)
            {
                entry.moved_to(place);
            }
        }
        rest = later;
        // The chunks.
        for chunk in &mut self.chunks {
            if rest.is_empty() {
                break;
            }
            let split = rest.partition_point(|&(seq, _)| seq <= chunk.last);
            let (now, later) = rest.split_at(split);
            rest = later;
            let now: Vec<(u64, Packed)> = now.iter().copied().filter(|&(seq, _)| seq >= chunk.first).collect();
            if now.is_empty() {
                continue;
            }
            if let Some(entries) = &mut chunk.entries {
                chunk.dirty |= apply_moves(entries, &now) && chunk.writing;
            } else if chunk.reading {
                chunk.moves.extend(now);
            } else {
                self.disk.submit(Op::Relocate { slot: chunk.slot, count: chunk.count, moves: now });
            }
        }
        // The back.
        apply_moves(&mut self.back, rest);
        self.poll();
    }

    /// Removes the entries at hand, oldest first, handing each to `each`, on and on as long as
    /// the next chunk is at hand; returns whether the run is empty (if not, the next chunk is
    /// being read: call again once it is).
    pub(super) fn take_each(&mut self, mut each: impl FnMut(PagedEntry)) -> bool {
        self.poll();
        while let Some(entry) = self.front.pop_front() {
            each(entry);
            if self.front.is_empty() {
                self.poll();
            }
        }
        self.is_empty()
    }

    /// Moves the full back into a chunk and starts its write.
    fn flush_back(&mut self) {
        let entries = std::mem::take(&mut self.back);
        let (Some(first), Some(last)) = (entries.first().map(|e| e.seq), entries.last().map(|e| e.seq)) else {
            return;
        };
        let id = self.next_id;
        let slot = self.next_slot;
        self.next_id += 1;
        self.next_slot += entries.len() as u64;
        self.in_chunks += entries.len();
        self.disk.submit(Op::Write { id, slot, entries: entries.clone() });
        self.chunks.push_back(Chunk {
            id,
            slot,
            count: entries.len(),
            first,
            last,
            entries: Some(entries),
            writing: true,
            dirty: false,
            reading: false,
            moves: Vec::new(),
            removed: Vec::new(),
        });
        self.poll();
    }

    /// A write is done: the chunk's entries leave memory, unless it is next after the front
    /// (it would be read straight back), it was relocated meanwhile (written again), or the
    /// write failed (they stay).
    fn written(&mut self, id: u64, ok: bool) {
        let Some(at) = self.position(id) else {
            return;
        };
        let Some(chunk) = self.chunks.get_mut(at) else {
            return;
        };
        chunk.writing = false;
        if !ok {
            return;
        }
        if std::mem::take(&mut chunk.dirty) {
            if let Some(entries) = &chunk.entries {
                chunk.writing = true;
                self.disk.submit(Op::Write { id, slot: chunk.slot, entries: entries.clone() });
            }
        } else if at > 0 {
            chunk.entries = None;
        }
    }

    /// A read is done: the chunk's entries are at hand (with the relocations made meanwhile),
    /// or, if it failed, lost to this run (their messages stay in the log and come back at
    /// the next restart if persistent).
    fn read(&mut self, id: u64, entries: std::io::Result<Vec<PagedEntry>>) {
        let Some(at) = self.position(id) else {
            return;
        };
        match entries {
            Ok(mut entries) if entries.len() == self.chunks.get(at).map_or(0, |c| c.count) => {
                if let Some(chunk) = self.chunks.get_mut(at) {
                    apply_moves(&mut entries, &std::mem::take(&mut chunk.moves));
                    chunk.reading = false;
                    chunk.entries = Some(entries);
                }
            }
            other => {
                let error = other.err().map_or_else(|| "short read".to_owned(), |e| e.to_string());
                if let Some(chunk) = self.chunks.remove(at) {
                    tracing::error!(entries = chunk.count, %error, "reading the paged index failed; skipping its entries");
                    self.in_chunks -= chunk.count - chunk.removed.len();
                }
            }
        }
    }

    /// Where chunk `id` is in the list, if still there (ids grow along the list).
    fn position(&self, id: u64) -> Option<usize> {
        self.chunks.binary_search_by_key(&id, |c| c.id).ok()
    }

    /// Refills the empty front with the next chunk at hand (leaving out its removed entries,
    /// and going on to the next if none is left), else with the back, and starts reading the
    /// chunk after it.
    fn advance(&mut self) {
        while self.front.is_empty() {
            if let Some(entries) = self.chunks.front_mut().and_then(|c| c.entries.take()) {
                let Some(chunk) = self.chunks.pop_front() else {
                    break;
                };
                self.in_chunks -= chunk.count - chunk.removed.len();
                self.front.extend(entries.into_iter().filter(|e| !chunk.removed.contains(&e.seq)));
                if self.chunks.is_empty() && self.next_slot > 0 {
                    // Nothing in the file is wanted any more: the next chunk starts a new one.
                    self.next_slot = 0;
                    self.disk.submit(Op::Reset);
                }
            } else {
                if self.chunks.is_empty() {
                    self.front.extend(self.back.drain(..));
                }
                break;
            }
        }
        if let Some(chunk) = self.chunks.front_mut().filter(|c| c.entries.is_none() && !c.reading) {
            chunk.reading = true;
            self.disk.submit(Op::Read { id: chunk.id, slot: chunk.slot, count: chunk.count });
        }
    }
}

/// `iter` forwards, or backwards when `rev`.
fn ordered<'a, T>(
    iter: impl DoubleEndedIterator<Item = &'a T> + 'a,
    rev: bool,
) -> Box<dyn Iterator<Item = &'a T> + 'a> {
    if rev { Box::new(iter.rev()) } else { Box::new(iter) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::super::probe;
    use super::*;

    fn entry(seq: u64) -> PagedEntry {
        PagedEntry { seq, expires_at: i64::MAX, segment: 1, offset: 16, len: 40, size: 16 }
    }

    fn run(dir: &Path) -> PagedRun {
        PagedRun::new(dir, "q".into(), Arc::new(|| {}))
    }

    /// Pops everything, waiting for reads as the queue does: (sequence number, segment) each.
    fn drain(run: &mut PagedRun) -> Vec<(u64, u32)> {
        let mut seen = Vec::new();
        for _ in 0..100_000 {
            match run.pop_front() {
                Some(e) => seen.push((e.seq, e.segment)),
                None if run.is_empty() => return seen,
                None => {
                    assert!(run.loading(), "nothing at hand only while the front is being read");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    run.poll();
                }
            }
        }
        panic!("the reads never completed");
    }

    /// Waits for every write to be done (their chunks' entries leave memory).
    fn settle(run: &mut PagedRun) {
        for _ in 0..10_000 {
            run.poll();
            if run.chunks.iter().all(|c| !c.writing && !c.reading) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("the writes never completed");
    }

    #[test]
    fn a_long_run_keeps_a_few_chunks_in_memory_and_gives_everything_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = run(dir.path());
        let total = CHUNK as u64 * 10 + 7;
        for seq in 0..total {
            run.push_back(entry(seq));
        }
        assert_eq!(run.len() as u64, total);
        assert_eq!(run.chunks.len(), 9);
        let in_memory: Vec<bool> = run.chunks.iter().map(|c| c.entries.is_some()).collect();
        assert_eq!(in_memory, [true, false, false, false, false, false, false, false, false], "only the next chunk");
        assert!(run.front.len() == CHUNK && run.back.len() == 7);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the index file is unlinked");
        // Relocating an entry that is in the file.
        run.relocate(&mut [(CHUNK as u64 * 5 + 3, Packed { segment: 9, offset: 16, len: 40 })]);
        let seen = drain(&mut run);
        assert_eq!(seen.len() as u64, total);
        assert!(seen.iter().enumerate().all(|(i, (seq, _))| *seq == i as u64), "in order");
        assert_eq!(seen.get(CHUNK * 5 + 3), Some(&(CHUNK as u64 * 5 + 3, 9)));
        assert!(run.is_empty() && run.chunks.is_empty() && run.next_slot == 0);
    }

    #[test]
    fn relocating_many_entries_reaches_front_file_and_back_and_skips_what_the_run_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = run(dir.path());
        // Even sequence numbers only, over the front, several chunks of file, and the back.
        let total = CHUNK as u64 * 6 + 10;
        for n in 0..total {
            run.push_back(entry(n * 2));
        }
        assert!(!run.chunks.is_empty() && !run.back.is_empty());
        // Every third message moved (as compaction reports them: unsorted), plus odd numbers
        // the run never held and numbers beyond its end.
        let moved = |seq: u64| Packed { segment: 7, offset: u32::try_from(seq).unwrap(), len: 40 };
        let mut moves: Vec<(u64, Packed)> =
            (0..total * 2).rev().filter(|seq| seq % 3 == 0).map(|s| (s, moved(s))).collect();
        moves.extend([(total * 2 + 1, moved(1)), (total * 4, moved(2))]);
        run.relocate(&mut moves);
        let seen = drain(&mut run);
        assert_eq!(seen.len() as u64, total, "nothing added or lost");
        for (n, (seq, segment)) in seen.into_iter().enumerate() {
            assert_eq!(seq, n as u64 * 2, "in order");
            assert_eq!(segment, if seq % 3 == 0 { 7 } else { 1 }, "seq {seq}");
        }
    }

    #[test]
    fn take_each_empties_front_file_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = run(dir.path());
        for seq in 0..(CHUNK as u64 * 3 + 5) {
            run.push_back(entry(seq));
        }
        let mut seqs = Vec::new();
        assert!(run.take_each(|e| seqs.push(e.seq)), "no runtime: the reads are done at once");
        assert_eq!(seqs, (0..CHUNK as u64 * 3 + 5).collect::<Vec<_>>());
        assert_eq!(run.len(), 0);
        // Usable again afterwards.
        run.push_back(entry(1_000_000));
        assert_eq!(run.pop_front().map(|e| e.seq), Some(1_000_000));
    }

    #[test]
    fn on_a_runtime_the_file_is_written_read_relocated_and_purged_off_its_thread() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().max_blocking_threads(1).build().unwrap();
        runtime.block_on(async {
            let before = probe::io_on_this_thread();
            let mut run = run(dir.path());
            let total = CHUNK as u64 * 5 + 3;
            for seq in 0..total {
                run.push_back(entry(seq));
            }
            settle(&mut run);
            assert_eq!(run.chunks.len(), 4);
            assert_eq!(run.chunks.iter().filter(|c| c.entries.is_some()).count(), 1, "the rest is in the file");
            // Moves into the front, the file (chunk 3) and the back.
            let place = Packed { segment: 9, offset: 32, len: 40 };
            let third = CHUNK as u64 * 3 + 10;
            run.relocate(&mut [(5, place), (third, place), (total - 1, place)]);
            // The first two chunks come back in order, the rest is purged.
            let mut seen = Vec::new();
            while seen.len() < CHUNK * 2 {
                match run.pop_front() {
                    Some(e) => seen.push(e.seq),
                    None => {
                        assert!(run.loading());
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        run.poll();
                    }
                }
            }
            assert_eq!(seen, (0..CHUNK as u64 * 2).collect::<Vec<_>>());
            let mut purged = Vec::new();
            for _ in 0..10_000 {
                if run.take_each(|e| purged.push((e.seq, e.segment))) {
                    break;
                }
                assert!(run.loading(), "an unfinished purge waits for a read");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(purged.len() as u64, total - CHUNK as u64 * 2, "every entry left, once");
            assert!(purged.iter().enumerate().all(|(i, &(seq, _))| seq == CHUNK as u64 * 2 + i as u64), "in order");
            let moved: Vec<u64> = purged.iter().filter(|&&(_, segment)| segment == 9).map(|&(seq, _)| seq).collect();
            assert_eq!(moved, [third, total - 1], "the relocations reached the file and the back");
            assert!(run.is_empty() && run.chunks.is_empty());
            assert_eq!(probe::io_on_this_thread(), before, "no file I/O on the runtime thread");
        });
    }

    #[test]
    fn a_chunk_relocated_while_being_written_or_read_keeps_the_new_place() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().max_blocking_threads(1).build().unwrap();
        runtime.block_on(async {
            let mut run = run(dir.path());
            // Hold the blocking pool's one thread: the writes wait behind it.
            let (open, wait) = std::sync::mpsc::channel::<()>();
            drop(tokio::task::spawn_blocking(move || wait.recv()));
            let total = CHUNK as u64 * 4;
            for seq in 0..total {
                run.push_back(entry(seq));
            }
            assert!(run.chunks.iter().all(|c| c.writing), "writes are waiting");
            let place = Packed { segment: 5, offset: 64, len: 40 };
            let in_written = CHUNK as u64 * 2 + 1;
            run.relocate(&mut [(in_written, place)]);
            open.send(()).unwrap();
            settle(&mut run);
            assert!(run.chunks.get(1).is_some_and(|c| c.entries.is_none()), "written again, then left memory");
            // Hold the pool again, and take the front: the next chunk is being read.
            let (open, wait) = std::sync::mpsc::channel::<()>();
            drop(tokio::task::spawn_blocking(move || wait.recv()));
            let mut seen = Vec::new();
            for _ in 0..CHUNK {
                seen.extend(run.pop_front().map(|e| (e.seq, e.segment)));
            }
            assert!(run.chunks.front().is_some_and(|c| c.reading && c.first == CHUNK as u64 * 2), "the read waits");
            let in_read = CHUNK as u64 * 2 + 7;
            run.relocate(&mut [(in_read, place)]);
            open.send(()).unwrap();
            seen.extend(drain(&mut run));
            assert_eq!(seen.len() as u64, total);
            assert!(seen.iter().enumerate().all(|(i, (seq, _))| *seq == i as u64), "in order");
            let moved: Vec<u64> = seen.iter().filter(|&&(_, segment)| segment == 5).map(|&(seq, _)| seq).collect();
            assert_eq!(moved, [in_written, in_read]);
        });
    }
}
