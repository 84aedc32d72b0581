//! A paged message's place in the log, packed small: the paged run keeps millions of them.

use charon_store::segment_log::Place;

/// Marks a paged message as a spill (transient) in [`PagedEntry::len`].
pub(super) const SPILL_BIT: u32 = 1 << 31;

/// A place in the log, packed for entries that keep one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Packed {
    pub(crate) segment: u32,
    pub(crate) offset: u32,
    pub(crate) len: u32,
}

impl Packed {
    /// `None` for places beyond what the packed form holds (such messages stay in memory).
    pub(crate) fn new(place: Place) -> Option<Self> {
        let len = place.len;
        (len & SPILL_BIT == 0).then_some(())?;
        Some(Self { segment: u32::try_from(place.segment).ok()?, offset: u32::try_from(place.offset).ok()?, len })
    }

    pub(crate) fn place(self) -> Place {
        Place { segment: u64::from(self.segment), offset: u64::from(self.offset), len: self.len }
    }
}

/// A ready message that is only in the log: 32 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PagedEntry {
    pub(crate) seq: u64,
    /// TTL deadline, ms since the epoch; `i64::MAX` for none.
    pub(crate) expires_at: i64,
    pub(crate) segment: u32,
    pub(crate) offset: u32,
    /// The framed record length; [`SPILL_BIT`] set for a spill.
    pub(crate) len: u32,
    /// Its size as length limits count it.
    pub(crate) size: u32,
}

impl PagedEntry {
    pub(crate) fn of(seq: u64, expires_at: Option<i64>, place: Packed, spilled: bool, size: u64) -> Option<Self> {
        Some(Self {
            seq,
            expires_at: expires_at.unwrap_or(i64::MAX),
            segment: place.segment,
            offset: place.offset,
            len: place.len | if spilled { SPILL_BIT } else { 0 },
            size: u32::try_from(size).ok()?,
        })
    }

    pub(crate) fn spilled(&self) -> bool {
        self.len & SPILL_BIT != 0
    }

    /// Compaction moved the message to `place`.
    pub(crate) fn moved_to(&mut self, place: Packed) {
        let spilled = if self.spilled() { SPILL_BIT } else { 0 };
        (self.segment, self.offset, self.len) = (place.segment, place.offset, place.len | spilled);
    }

    pub(crate) fn place(&self) -> Place {
        Packed { segment: self.segment, offset: self.offset, len: self.len & !SPILL_BIT }.place()
    }

    pub(crate) fn expires_at(&self) -> Option<i64> {
        (self.expires_at != i64::MAX).then_some(self.expires_at)
    }
}
