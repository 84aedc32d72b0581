//! The paged run of a queue: its entries in sequence order, with only its two ends in memory.
//!
//! New entries gather at the back; a full chunk of them is appended to an index file; the
//! front is read back from the file a chunk at a time as the head takes entries. However long
//! the queue, the run costs two chunks of memory (the file is unlinked as soon as it is created,
//! so nothing is left behind, even by a crash; a restart rebuilds the run from the log).
//!
//! Should the file fail (disk full), entries simply stay at the back, in memory.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::packed::{Packed, PagedEntry};

/// Entries per chunk read or written at once (32 KiB): each end of the run holds at most one
/// chunk in memory.
const CHUNK: usize = 1024;
/// Bytes per entry in the file.
const ENTRY_BYTES: usize = 32;

/// The index file: entries `read..written` are in it, in order.
#[derive(Debug)]
struct IndexFile {
    file: File,
    read: u64,
    written: u64,
}

#[derive(Debug)]
pub(super) struct PagedRun {
    /// The oldest entries; never empty while the run is not.
    front: VecDeque<PagedEntry>,
    /// Entries after `front`, when the front chunk was full.
    file: Option<IndexFile>,
    /// The newest entries, after the file's.
    back: Vec<PagedEntry>,
    /// Where the index file goes, and a name for it.
    dir: std::path::PathBuf,
    name: String,
}

impl PagedRun {
    pub(super) fn new(dir: &Path, name: String) -> Self {
        Self { front: VecDeque::new(), file: None, back: Vec::new(), dir: dir.to_owned(), name }
    }

    fn in_file(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.written - f.read)
    }

    pub(super) fn len(&self) -> usize {
        self.front.len() + usize::try_from(self.in_file()).unwrap_or(usize::MAX) + self.back.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.front.is_empty()
    }

    /// The oldest entry.
    pub(super) fn front(&self) -> Option<&PagedEntry> {
        self.front.front()
    }

    /// The oldest entries, up to `n` (at least one chunk's worth when there are that many).
    pub(super) fn first(&self, n: usize) -> impl Iterator<Item = &PagedEntry> {
        self.front.iter().take(n)
    }

    /// Adds the newest entry.
    pub(super) fn push_back(&mut self, entry: PagedEntry) {
        if self.in_file() == 0 && self.back.is_empty() && self.front.len() < CHUNK {
            self.front.push_back(entry);
            return;
        }
        self.back.push(entry);
        if self.back.len().is_multiple_of(CHUNK) {
            self.flush_back();
        }
    }

    /// Takes the oldest entry.
    pub(super) fn pop_front(&mut self) -> Option<PagedEntry> {
        let entry = self.front.pop_front()?;
        if self.front.is_empty() {
            self.refill_front();
        }
        Some(entry)
    }

    /// Gives the entries of `moves` (by sequence number) their new places in the log;
    /// sequence numbers the run does not hold are skipped. Compaction moves messages a segment
    /// at a time, so the moves that fall in the file are applied a chunk at a time: one read
    /// and one write for all the moves in a chunk, rather than a search of the file for each.
    pub(super) fn relocate(&mut self, moves: &mut [(u64, Packed)]) {
        moves.sort_unstable_by_key(|&(seq, _)| seq);
        let after_front = self.front.back().map_or(u64::MAX, |e| e.seq);
        let before_back = self.back.first().map_or(u64::MAX, |e| e.seq);
        let mut in_file = Vec::new();
        for &(seq, place) in moves.iter() {
            if let Ok(at) = self.front.binary_search_by_key(&seq, |e| e.seq) {
                if let Some(entry) = self.front.get_mut(at) {
                    entry.moved_to(place);
                }
            } else if let Ok(at) = self.back.binary_search_by_key(&seq, |e| e.seq) {
                if let Some(entry) = self.back.get_mut(at) {
                    entry.moved_to(place);
                }
            } else if seq > after_front && seq < before_back {
                in_file.push((seq, place));
            }
        }
        if let Some(index) = self.file.as_ref().filter(|_| !in_file.is_empty()) {
            relocate_in_file(index, &in_file);
        }
    }

    /// Removes every entry, oldest first, handing each to `each`.
    pub(super) fn take_each(&mut self, mut each: impl FnMut(PagedEntry)) {
        while let Some(entry) = self.front.pop_front() {
            each(entry);
            if self.front.is_empty() {
                self.refill_front();
            }
        }
        self.file = None;
    }

    /// Appends the back to the file (creating it on first use).
    fn flush_back(&mut self) {
        if self.file.is_none() {
            match create_unlinked(&self.dir, &self.name) {
                Ok(file) => self.file = Some(IndexFile { file, read: 0, written: 0 }),
                Err(error) => {
                    tracing::warn!(queue = self.name, %error, "no index file for paged messages; they stay in memory");
                    return;
                }
            }
        }
        let Some(index) = self.file.as_mut() else {
            return;
        };
        let mut bytes = Vec::with_capacity(self.back.len() * ENTRY_BYTES);
        for entry in &self.back {
            bytes.extend_from_slice(&encode(entry));
        }
        let at = index.written * ENTRY_BYTES as u64;
        match index.file.write_all_at(&bytes, at) {
            Ok(()) => {
                index.written += self.back.len() as u64;
                self.back.clear();
            }
            Err(error) => {
                tracing::warn!(queue = self.name, %error, "writing the paged index failed; entries stay in memory");
            }
        }
    }

    /// Loads the next chunk into the empty front: from the file, else the back.
    fn refill_front(&mut self) {
        if let Some(index) = self.file.as_mut().filter(|f| f.read < f.written) {
            let count = (index.written - index.read).min(CHUNK as u64);
            match read_entries(index, index.read, count) {
                Ok(entries) => {
                    self.front.extend(entries);
                    index.read += count;
                }
                Err(error) => {
                    // The entries in the file are lost to this run (their messages stay in the
                    // log and come back at the next restart if persistent).
                    tracing::error!(queue = self.name, %error, "reading the paged index failed; skipping its entries");
                    index.read = index.written;
                }
            }
            if index.read == index.written {
                self.file = None;
            }
        }
        if self.front.is_empty() {
            self.front.extend(self.back.drain(..));
        }
    }
}

fn create_unlinked(dir: &Path, name: &str) -> std::io::Result<File> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let path = dir.join(format!("paged-{name}-{nanos}.idx"));
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

fn encode(entry: &PagedEntry) -> [u8; ENTRY_BYTES] {
    let mut out = [0u8; ENTRY_BYTES];
    let fields: [&[u8]; 6] = [
        &entry.seq.to_le_bytes(),
        &entry.expires_at.to_le_bytes(),
        &entry.segment.to_le_bytes(),
        &entry.offset.to_le_bytes(),
        &entry.len.to_le_bytes(),
        &entry.size.to_le_bytes(),
    ];
    let mut at = 0;
    for field in fields {
        if let Some(slot) = out.get_mut(at..at + field.len()) {
            slot.copy_from_slice(field);
        }
        at += field.len();
    }
    out
}

fn decode(bytes: &[u8]) -> Option<PagedEntry> {
    let u64_at = |at: usize| bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let u32_at = |at: usize| bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    Some(PagedEntry {
        seq: u64_at(0)?,
        expires_at: i64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?),
        segment: u32_at(16)?,
        offset: u32_at(20)?,
        len: u32_at(24)?,
        size: u32_at(28)?,
    })
}

/// Entries `from..from + count` of the file.
fn read_entries(index: &IndexFile, from: u64, count: u64) -> std::io::Result<Vec<PagedEntry>> {
    let mut bytes = vec![0u8; usize::try_from(count).unwrap_or(0) * ENTRY_BYTES];
    index.file.read_exact_at(&mut bytes, from * ENTRY_BYTES as u64)?;
    Ok(bytes.chunks_exact(ENTRY_BYTES).filter_map(decode).collect())
}

/// Applies `moves` (sorted by sequence number) to the entries in the file: finds the first
/// entry at or after the next move by binary search, reads the chunk that starts there,
/// applies every move that falls in it, writes it back, and goes on after it.
fn relocate_in_file(index: &IndexFile, moves: &[(u64, Packed)]) {
    let read_entry = |i: u64| {
        let mut bytes = [0u8; ENTRY_BYTES];
        index.file.read_exact_at(&mut bytes, i * ENTRY_BYTES as u64).ok().and_then(|()| decode(&bytes))
    };
    let mut rest = moves;
    let mut from = index.read;
    while let Some(&(next, _)) = rest.first() {
        // The first entry in from..written whose sequence number is at least `next`.
        let (mut low, mut high) = (from, index.written);
        while low < high {
            let mid = low + (high - low) / 2;
            let Some(entry) = read_entry(mid) else {
                return;
            };
            if entry.seq < next {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        let count = (index.written - low).min(CHUNK as u64);
        if count == 0 {
            return;
        }
        let Ok(mut entries) = read_entries(index, low, count) else {
            return;
        };
        let last = entries.last().map_or(next, |e| e.seq);
        // At least the move for `next`: the chunk starts at or after it.
        let (now, later) = rest.split_at(rest.partition_point(|&(seq, _)| seq <= last).max(1));
        let mut changed = false;
        for &(seq, place) in now {
            if let Ok(i) = entries.binary_search_by_key(&seq, |e| e.seq)
                && let Some(entry) = entries.get_mut(i)
            {
                entry.moved_to(place);
                changed = true;
            }
        }
        if changed {
            let encoded: Vec<u8> = entries.iter().flat_map(encode).collect();
            if let Err(error) = index.file.write_all_at(&encoded, low * ENTRY_BYTES as u64) {
                tracing::warn!(%error, "updating paged index entries failed");
            }
        }
        rest = later;
        from = low + count;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry(seq: u64) -> PagedEntry {
        PagedEntry { seq, expires_at: i64::MAX, segment: 1, offset: 16, len: 40, size: 16 }
    }

    #[test]
    fn a_long_run_keeps_two_chunks_in_memory_and_gives_everything_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = PagedRun::new(dir.path(), "q".into());
        let total = CHUNK as u64 * 10 + 7;
        for seq in 0..total {
            run.push_back(entry(seq));
        }
        assert_eq!(run.len() as u64, total);
        assert!(run.front.len() <= CHUNK && run.back.len() < CHUNK, "only the ends are in memory");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the index file is unlinked");
        // Relocating an entry that is in the file.
        run.relocate(&mut [(CHUNK as u64 * 5 + 3, Packed { segment: 9, offset: 16, len: 40 })]);
        let mut seen = Vec::new();
        while let Some(e) = run.pop_front() {
            seen.push((e.seq, e.segment));
        }
        assert_eq!(seen.len() as u64, total);
        assert!(seen.iter().enumerate().all(|(i, (seq, _))| *seq == i as u64), "in order");
        assert_eq!(seen.get(CHUNK * 5 + 3), Some(&(CHUNK as u64 * 5 + 3, 9)));
        assert!(run.is_empty() && run.file.is_none());
    }

    #[test]
    fn relocating_many_entries_reaches_front_file_and_back_and_skips_what_the_run_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = PagedRun::new(dir.path(), "q".into());
        // Even sequence numbers only, over the front, several chunks of file, and the back.
        let total = CHUNK as u64 * 6 + 10;
        for n in 0..total {
            run.push_back(entry(n * 2));
        }
        assert!(run.file.is_some() && !run.back.is_empty());
        // Every third message moved (as compaction reports them: unsorted), plus odd numbers
        // the run never held and numbers beyond its end.
        let moved = |seq: u64| Packed { segment: 7, offset: u32::try_from(seq).unwrap(), len: 40 };
        let mut moves: Vec<(u64, Packed)> =
            (0..total * 2).rev().filter(|seq| seq % 3 == 0).map(|s| (s, moved(s))).collect();
        moves.extend([(total * 2 + 1, moved(1)), (total * 4, moved(2))]);
        run.relocate(&mut moves);
        let mut seen = 0;
        while let Some(e) = run.pop_front() {
            assert_eq!(e.seq, seen * 2, "in order, nothing added");
            let expected = if e.seq % 3 == 0 { (7, u32::try_from(e.seq).unwrap()) } else { (1, 16) };
            assert_eq!((e.segment, e.offset), expected, "seq {}", e.seq);
            seen += 1;
        }
        assert_eq!(seen, total);
    }

    #[test]
    fn take_each_empties_front_file_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = PagedRun::new(dir.path(), "q".into());
        for seq in 0..(CHUNK as u64 * 3 + 5) {
            run.push_back(entry(seq));
        }
        let mut count = 0;
        run.take_each(|_| count += 1);
        assert_eq!(count, CHUNK * 3 + 5);
        assert_eq!(run.len(), 0);
        // Usable again afterwards.
        run.push_back(entry(1_000_000));
        assert_eq!(run.pop_front().map(|e| e.seq), Some(1_000_000));
    }
}
