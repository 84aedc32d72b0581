//! Where a record lies in the log.

/// Where a record lies: its segment, and the offset and length of the framed record there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Segment number.
    pub segment: u64,
    /// Byte offset of the record's frame in the segment.
    pub offset: u64,
    /// Framed length.
    pub len: u32,
}

/// Where an enqueued or spilled message was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Queue id.
    pub queue: u64,
    /// Sequence number.
    pub seq: u64,
    /// Where.
    pub place: Place,
}
