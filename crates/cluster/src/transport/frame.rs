//! The frames nodes exchange once authenticated: sans-IO, bytes in and frames out.
//!
//! A frame is `length: u32` (of what follows), `kind: u8`, `group: u64` (0 is the metadata
//! group; quorum queues get theirs), `id: u64` (a request's number, echoed by its response),
//! then the body. A peer's bytes are as hostile as a client's: a length over [`MAX_FRAME`] or
//! under the header, or an unknown kind, is an error that closes the connection.

use thiserror::Error;

/// The largest frame accepted, body and header: a metadata snapshot travels in one.
pub const MAX_FRAME: usize = 64 << 20;
/// `kind`, `group` and `id`.
const HEADER: usize = 1 + 8 + 8;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An `AppendEntries` request.
    Append,
    /// A vote request.
    Vote,
    /// A whole snapshot (metadata, then the machine's bytes).
    Snapshot,
    /// A command a member forwards to the leader it knows.
    Propose,
    /// Is the node there? Answered by the transport itself (liveness, see `liveness.rs`).
    Ping,
    /// A change of the group's members (a node joining, or forgotten).
    Membership,
    /// A request for a queue that lives on the answering node, from a node that reaches it
    /// through a proxy (the engine encodes it; `group` is 0).
    Queue,
    /// The leader hands leadership over to the node asked.
    TransferLeader,
    /// The answer to the request with the same id.
    Answer,
    /// The request with the same id failed on the peer; the body is the reason.
    Failed,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Self::Append => 1,
            Self::Vote => 2,
            Self::Snapshot => 3,
            Self::Answer => 4,
            Self::Failed => 5,
            Self::Propose => 6,
            Self::Ping => 7,
            Self::Membership => 8,
            Self::Queue => 9,
            Self::TransferLeader => 10,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::Append,
            2 => Self::Vote,
            10 => Self::TransferLeader,
            3 => Self::Snapshot,
            4 => Self::Answer,
            5 => Self::Failed,
            6 => Self::Propose,
            7 => Self::Ping,
            8 => Self::Membership,
            9 => Self::Queue,
            _ => return None,
        })
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// What it carries.
    pub kind: Kind,
    /// The Raft group it is for.
    pub group: u64,
    /// The request's number.
    pub id: u64,
    /// The request or answer, encoded by the transport.
    pub body: Vec<u8>,
}

/// A peer sent bytes that are no frame.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    /// The length is over [`MAX_FRAME`] or shorter than a header.
    #[error("frame length {0} out of bounds")]
    Length(usize),
    /// The kind byte names nothing.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// The frame to send is larger than [`MAX_FRAME`].
    #[error("frame of {0} bytes is too large to send")]
    TooLarge(usize),
}

impl Frame {
    /// Appends the encoded frame to `out`.
    ///
    /// # Errors
    /// The frame is larger than [`MAX_FRAME`].
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let length = HEADER + self.body.len();
        if length > MAX_FRAME {
            return Err(FrameError::TooLarge(length));
        }
        let length = u32::try_from(length).map_err(|_| FrameError::TooLarge(length))?;
        out.extend_from_slice(&length.to_be_bytes());
        out.push(self.kind.code());
        out.extend_from_slice(&self.group.to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.body);
        Ok(())
    }

    /// Takes one whole frame off the front of `input`, or `None` while it has not all come.
    ///
    /// # Errors
    /// The bytes are no frame; the connection must close.
    pub fn decode(input: &mut Vec<u8>) -> Result<Option<Self>, FrameError> {
        let Some(prefix) = input.first_chunk::<4>() else {
            return Ok(None);
        };
        let length = usize::try_from(u32::from_be_bytes(*prefix)).unwrap_or(usize::MAX);
        if !(HEADER..=MAX_FRAME).contains(&length) {
            return Err(FrameError::Length(length));
        }
        if input.len() < 4 + length {
            return Ok(None);
        }
        // At least a header's worth follows the prefix (checked above).
        let mut bytes = input.drain(..4 + length).skip(4);
        let code = bytes.next().unwrap_or_default();
        let mut word = || {
            let mut word = [0; 8];
            for byte in &mut word {
                *byte = bytes.next().unwrap_or_default();
            }
            u64::from_be_bytes(word)
        };
        let (group, id) = (word(), word());
        let body = bytes.collect();
        let kind = Kind::from_code(code).ok_or(FrameError::Kind(code))?;
        Ok(Some(Self { kind, group, id, body }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: Kind, body: &[u8]) -> Frame {
        Frame { kind, group: 7, id: u64::MAX - 1, body: body.to_vec() }
    }

    #[test]
    fn frames_come_back_as_they_went_even_a_byte_at_a_time() {
        let sent = [frame(Kind::Append, b"entries"), frame(Kind::Answer, b""), frame(Kind::Failed, b"why")];
        let mut wire = Vec::new();
        for f in &sent {
            f.encode(&mut wire).unwrap();
        }
        let mut input = Vec::new();
        let mut got = Vec::new();
        for byte in wire {
            input.push(byte);
            while let Some(f) = Frame::decode(&mut input).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, sent);
        assert!(input.is_empty());
    }

    #[test]
    fn hostile_lengths_and_kinds_are_refused_before_anything_is_buffered() {
        let mut huge = u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes().to_vec();
        assert_eq!(Frame::decode(&mut huge), Err(FrameError::Length(MAX_FRAME + 1)));
        let mut short = vec![0, 0, 0, 3, 1, 2, 3];
        assert_eq!(Frame::decode(&mut short), Err(FrameError::Length(3)));
        let mut unknown = Vec::new();
        frame(Kind::Vote, b"x").encode(&mut unknown).unwrap();
        unknown[4] = 0;
        assert_eq!(Frame::decode(&mut unknown), Err(FrameError::Kind(0)));
        let too_large = Frame { kind: Kind::Snapshot, group: 0, id: 0, body: vec![0; MAX_FRAME] };
        assert_eq!(too_large.encode(&mut Vec::new()), Err(FrameError::TooLarge(MAX_FRAME + HEADER)));
    }
}
