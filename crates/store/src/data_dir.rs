//! The data directory: a `VERSION` file that says what wrote it, and a `LOCK` file held for the
//! broker's life so that two brokers never write one directory.
//!
//! A directory this broker does not recognise is refused with a clear error, never reset: it
//! may hold someone's messages.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The first line of `VERSION` for the layout this build writes.
pub const VERSION_LINE: &str = "charon-data 2";

/// Why a data directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// Creating, reading or locking failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the lock.
    #[error("{path} is locked: another charon is using this data directory")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// Written by another layout version.
    #[error("{path}: unknown data directory version {found:?} (this charon reads {VERSION_LINE:?})")]
    UnknownVersion {
        /// The version file.
        path: PathBuf,
        /// What it says.
        found: String,
    },
    /// Not empty, but not a Charon data directory.
    #[error("{path} is not empty and has no VERSION file: not a charon data directory (refusing to use it)")]
    NotADataDir {
        /// The directory.
        path: PathBuf,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DirError + '_ {
    move |source| DirError::Io { path: path.to_owned(), source }
}

/// An open, locked data directory.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    /// Holds the exclusive lock until dropped.
    _lock: File,
}

impl DataDir {
    /// Opens `path`, creating and stamping it when it does not exist or is empty.
    ///
    /// # Errors
    /// [`DirError::Locked`] when another broker uses it, [`DirError::UnknownVersion`] or
    /// [`DirError::NotADataDir`] when it is not ours, [`DirError::Io`] otherwise.
    pub fn open(path: &Path) -> Result<Self, DirError> {
        std::fs::create_dir_all(path).map_err(io(path))?;
        let version = path.join("VERSION");
        let lock_path = path.join("LOCK");
        match std::fs::read_to_string(&version) {
            Ok(text) => {
                let found = text.lines().next().unwrap_or_default().to_owned();
                if found != VERSION_LINE {
                    return Err(DirError::UnknownVersion { path: version, found });
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let mut entries = std::fs::read_dir(path).map_err(io(path))?;
                if entries.next().is_some() {
                    return Err(DirError::NotADataDir { path: path.to_owned() });
                }
            }
            Err(error) => return Err(io(&version)(error)),
        }
        let lock =
            OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(DirError::Locked { path: lock_path }),
            Err(std::fs::TryLockError::Error(error)) => return Err(io(&lock_path)(error)),
        }
        if !version.exists() {
            let mut file = File::create(&version).map_err(io(&version))?;
            file.write_all(format!("{VERSION_LINE}\n").as_bytes()).map_err(io(&version))?;
            file.sync_all().map_err(io(&version))?;
            File::open(path).and_then(|dir| dir.sync_all()).map_err(io(path))?;
        }
        Ok(Self { path: path.to_owned(), _lock: lock })
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the message log's segments live.
    #[must_use]
    pub fn log_dir(&self) -> PathBuf {
        self.path.join("messages")
    }

    /// The metadata store's file.
    #[must_use]
    pub fn meta_path(&self) -> PathBuf {
        self.path.join("meta.redb")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_new_directory_is_stamped_and_locked_once() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("data");
        let first = DataDir::open(&path).unwrap();
        assert_eq!(std::fs::read_to_string(path.join("VERSION")).unwrap(), "charon-data 2\n");
        let second = DataDir::open(&path).unwrap_err();
        assert!(matches!(second, DirError::Locked { .. }));
        assert!(second.to_string().contains("another charon"), "{second}");
        drop(first);
        DataDir::open(&path).unwrap();
    }

    #[test]
    fn foreign_or_newer_directories_are_refused_untouched() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("VERSION"), "charon-data 3\n").unwrap();
        let error = DataDir::open(root.path()).unwrap_err();
        assert!(matches!(&error, DirError::UnknownVersion { found, .. } if found == "charon-data 3"), "{error}");
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("somebody.db"), "x").unwrap();
        assert!(matches!(DataDir::open(other.path()).unwrap_err(), DirError::NotADataDir { .. }));
        assert!(!other.path().join("VERSION").exists());
    }
}
