//! Why the durable store could not be opened or written. Every variant names the file, so the
//! one line an operator sees says where to look.

use std::io;

/// What to do about damaged data: the node never repairs it by dropping data on its own.
const CORRUPT_ADVICE: &str = "the node will not start on damaged data; restore this data \
     directory from a backup, or wipe it and start the node with --join to catch up from the \
     leader (docs/operations.md, \"Damaged or foreign data\")";

/// A failure of the durable store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The operating system refused an operation on `file`.
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: io::Error,
    },
    /// `file` does not hold what this release wrote there: a checksum, a length or a decode
    /// failed at `offset`.
    #[error("{file}: damaged at byte {offset}: {reason}; {CORRUPT_ADVICE}")]
    Corrupt {
        file: String,
        offset: u64,
        reason: String,
    },
    /// `file` was written by another release (or another program) in a layout this one cannot
    /// read.
    #[error("{file}: {reason}")]
    Foreign { file: String, reason: String },
}

impl StoreError {
    /// Wraps an I/O error on `file`.
    pub fn io(file: impl Into<String>, source: io::Error) -> Self {
        StoreError::Io {
            file: file.into(),
            source,
        }
    }

    /// Damage in `file` at `offset`.
    pub fn corrupt(file: impl Into<String>, offset: u64, reason: impl Into<String>) -> Self {
        StoreError::Corrupt {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}
