//! Charon's durable storage.
//!
//! - [`segment_log`]: the append-only message log — segment files of CRC-framed records
//!   (enqueues, removals, delivery marks), written by one thread with group commit so that one
//!   `fdatasync` covers every record that arrived meanwhile; replayed at start.
//! - [`codec`]: a message of the model as the bytes of an enqueue record (the original protocol
//!   bytes plus the broker's annotations).
//! - [`data_dir`]: the data directory — version file and lock file.
//! - [`meta`]: durable topology and policies in redb.
//! - [`access`]: durable users, vhosts and permissions, in the same redb file.
//! - [`redrives`]: durable redrive jobs, in the same redb file.

pub mod access;
pub mod codec;
pub mod data_dir;
pub mod meta;
pub mod redrives;
pub mod segment_log;
