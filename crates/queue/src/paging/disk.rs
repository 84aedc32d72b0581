//! The paged run's index file, worked on off the queue task: its reads and writes run one at a
//! time, in the order asked, on the runtime's blocking pool (on the caller's thread when there
//! is no runtime, as in tests of the state alone). Each result comes back through a channel
//! the run takes from at its next call; a finished read also wakes the queue, whose head may
//! be waiting for it.
//!
//! The file is unlinked as soon as it is created, so nothing is left behind, even by a crash
//! (a restart rebuilds the run from the log).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use parking_lot::Mutex;

use super::packed::{Packed, PagedEntry};
use super::probe;

/// Bytes per entry in the file.
const ENTRY_BYTES: usize = 32;

/// Called when a read is done: wakes the queue.
pub(super) type Waker = Arc<dyn Fn() + Send + Sync>;

/// One piece of work on the file. `id` names the chunk it is for; `slot` is the index of the
/// chunk's first entry in the file.
#[derive(Debug)]
pub(super) enum Op {
    /// Writes entries at `slot` (creating the file first if there is none).
    Write { id: u64, slot: u64, entries: Vec<PagedEntry> },
    /// Reads `count` entries from `slot`.
    Read { id: u64, slot: u64, count: usize },
    /// Gives the entries among `count` from `slot` their new places (`moves`, sorted by
    /// sequence number), by reading them and writing them back.
    Relocate { slot: u64, count: usize, moves: Vec<(u64, Packed)> },
    /// Closes the file: nothing in it is wanted any more.
    Reset,
}

/// What an operation came to.
#[derive(Debug)]
pub(super) enum Done {
    Written { id: u64, ok: bool },
    Read { id: u64, entries: std::io::Result<Vec<PagedEntry>> },
}

/// What the operations share with the thread running them.
struct Shared {
    queue: Mutex<Pending>,
    done: Sender<Done>,
    wake: Waker,
    dir: PathBuf,
    name: String,
}

/// Operations not started yet, and the file (taken out under the lock, used outside it).
struct Pending {
    ops: VecDeque<Op>,
    /// Whether a thread is running the operations.
    running: bool,
    file: Option<Arc<File>>,
}

/// The run's handle on its file.
pub(super) struct Disk {
    shared: Arc<Shared>,
    done: Receiver<Done>,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk").field("name", &self.shared.name).finish_non_exhaustive()
    }
}

impl Disk {
    pub(super) fn new(dir: &Path, name: String, wake: Waker) -> Self {
        let (tx, done) = std::sync::mpsc::channel();
        let pending = Pending { ops: VecDeque::new(), running: false, file: None };
        let shared = Arc::new(Shared { queue: Mutex::new(pending), done: tx, wake, dir: dir.to_owned(), name });
        Self { shared, done }
    }

    /// Queues `op` after those already asked for.
    pub(super) fn submit(&self, op: Op) {
        let start = {
            let mut pending = self.shared.queue.lock();
            pending.ops.push_back(op);
            !std::mem::replace(&mut pending.running, true)
        };
        if !start {
            return;
        }
        let shared = Arc::clone(&self.shared);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || run_ops(&shared, true))),
            Err(_) => run_ops(&shared, false),
        }
    }

    /// The next result, if one is in.
    pub(super) fn try_done(&self) -> Option<Done> {
        self.done.try_recv().ok()
    }

    /// The file as it is now, for reading chunks written to it off the queue task (browsing):
    /// a reset later starts a new file and leaves this one whole for as long as it is held.
    pub(super) fn file(&self) -> Option<Arc<File>> {
        self.shared.queue.lock().file.clone()
    }
}

/// Marks the operations as no longer running should one panic, so that later ones start.
struct Running<'a>(&'a Shared);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.queue.lock().running = false;
        }
    }
}

/// Runs the queued operations in order until there are none.
fn run_ops(shared: &Shared, wake: bool) {
    let _running = Running(shared);
    loop {
        let (op, file) = {
            let mut pending = shared.queue.lock();
            let Some(op) = pending.ops.pop_front() else {
                pending.running = false;
                return;
            };
            (op, pending.file.clone())
        };
        match op {
            Op::Reset => shared.queue.lock().file = None,
            Op::Write { id, slot, entries } => {
                let file = match file {
                    Some(file) => Ok(file),
                    None => create_unlinked(&shared.dir, &shared.name).map(Arc::new).inspect(|file| {
                        shared.queue.lock().file = Some(Arc::clone(file));
                    }),
                };
                let written = file.and_then(|file| write_entries(&file, slot, &entries));
                if let Err(error) = &written {
                    tracing::warn!(queue = shared.name, %error, "writing the paged index failed; entries stay in memory");
                }
                let _ = shared.done.send(Done::Written { id, ok: written.is_ok() });
            }
            Op::Read { id, slot, count } => {
                let entries = match file {
                    Some(file) => read_entries(&file, slot, count),
                    None => Err(std::io::Error::other("no index file")),
                };
                let _ = shared.done.send(Done::Read { id, entries });
                if wake {
                    (shared.wake)();
                }
            }
            Op::Relocate { slot, count, moves } => {
                let relocated = match file {
                    Some(file) => relocate(&file, slot, count, &moves),
                    None => Err(std::io::Error::other("no index file")),
                };
                if let Err(error) = relocated {
                    tracing::warn!(queue = shared.name, %error, "updating paged index entries failed");
                }
            }
        }
    }
}

fn create_unlinked(dir: &Path, name: &str) -> std::io::Result<File> {
    probe::note_io();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let path = dir.join(format!("paged-{name}-{nanos}.idx"));
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

fn write_entries(file: &File, slot: u64, entries: &[PagedEntry]) -> std::io::Result<()> {
    probe::note_io();
    let bytes: Vec<u8> = entries.iter().flat_map(encode).collect();
    file.write_all_at(&bytes, slot * ENTRY_BYTES as u64)
}

/// Entries `slot..slot + count` of the file.
pub(crate) fn read_entries(file: &File, slot: u64, count: usize) -> std::io::Result<Vec<PagedEntry>> {
    probe::note_io();
    let mut bytes = vec![0u8; count * ENTRY_BYTES];
    file.read_exact_at(&mut bytes, slot * ENTRY_BYTES as u64)?;
    Ok(bytes.chunks_exact(ENTRY_BYTES).filter_map(decode).collect())
}

/// Applies `moves` to the `count` entries at `slot`: one read and, if any applied, one write.
fn relocate(file: &File, slot: u64, count: usize, moves: &[(u64, Packed)]) -> std::io::Result<()> {
    let mut entries = read_entries(file, slot, count)?;
    if apply_moves(&mut entries, moves) {
        write_entries(file, slot, &entries)?;
    }
    Ok(())
}

/// Gives the entries (sorted by sequence number) that `moves` names their new places;
/// returns whether any did.
pub(super) fn apply_moves(entries: &mut [PagedEntry], moves: &[(u64, Packed)]) -> bool {
    let mut changed = false;
    for &(seq, place) in moves {
        if let Ok(i) = entries.binary_search_by_key(&seq, |e| e.seq)
            && let Some(entry) = entries.get_mut(i)
        {
            entry.moved_to(place);
            changed = true;
        }
    }
    changed
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry(seq: u64) -> PagedEntry {
        PagedEntry { seq, expires_at: -5, segment: 3, offset: 16, len: 40, size: 12 }
    }

    #[test]
    fn operations_run_in_order_and_report_what_they_did() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::new(dir.path(), "q".into(), Arc::new(|| {}));
        disk.submit(Op::Write { id: 1, slot: 0, entries: (0..4).map(entry).collect() });
        disk.submit(Op::Relocate { slot: 0, count: 4, moves: vec![(2, Packed { segment: 9, offset: 8, len: 7 })] });
        disk.submit(Op::Read { id: 1, slot: 1, count: 3 });
        assert!(matches!(disk.try_done(), Some(Done::Written { id: 1, ok: true })));
        let Some(Done::Read { id: 1, entries: Ok(entries) }) = disk.try_done() else { panic!("read back") };
        let seen: Vec<(u64, u32, u32)> = entries.iter().map(|e| (e.seq, e.segment, e.offset)).collect();
        assert_eq!(seen, [(1, 3, 16), (2, 9, 8), (3, 3, 16)]);
        assert_eq!(entries.first().map(|e| (e.expires_at, e.len, e.size)), Some((-5, 40, 12)));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the index file is unlinked");
        disk.submit(Op::Reset);
        disk.submit(Op::Read { id: 2, slot: 0, count: 1 });
        assert!(matches!(disk.try_done(), Some(Done::Read { id: 2, entries: Err(_) })), "no file after a reset");
        assert!(disk.try_done().is_none());
    }
}
