//! Small files that hold one value each (the vote, the latest snapshot, the cluster identity):
//! written atomically ([`write_atomically`]) and checksummed, so a reader gets the previous
//! value or the new one, whole, and damage is reported instead of misread.
//!
//! Layout: an 8-byte magic naming what the file holds, a `u32` little-endian format number,
//! then one [`codec::frame`] whose payload is the codec-encoded value.

use raftlock_core::codec::{self, FrameRead};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;
use crate::fs::{write_atomically, write_atomically_with, Dir};

/// Format number of every checked file this release writes; bump it when a layout changes.
pub const FILE_FORMAT: u32 = 1;

const PREFIX_LEN: usize = 12;

/// Writes `value` to `name`, durably and atomically.
pub fn save<T: Serialize>(
    dir: &dyn Dir,
    name: &str,
    magic: &[u8; 8],
    value: &T,
) -> Result<(), StoreError> {
    let payload = codec::encode(value)
        .map_err(|e| StoreError::corrupt(dir.describe(name), 0, e.to_string()))?;
    write_payload(dir, name, magic, &[&payload])
}

/// Writes to `name`, durably and atomically, a value made of the fields `head` followed by a
/// last field holding `bytes` (such as a snapshot: its metadata, then its encoded state), so
/// that [`load`] of the whole value reads it back. The bytes are written where they lie: for a
/// snapshot of a large state that spares three copies of ~100 MB ([`save`] would encode the
/// value into a payload, frame it and prefix it, each a new buffer).
pub fn save_with_bytes<T: Serialize>(
    dir: &dyn Dir,
    name: &str,
    magic: &[u8; 8],
    head: &T,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let before = codec::encode_before_bytes(head, bytes.len())
        .map_err(|e| StoreError::corrupt(dir.describe(name), 0, e.to_string()))?;
    write_payload(dir, name, magic, &[&before, bytes])
}

/// Writes to `name`, durably and atomically, a value made of the fields `head` followed by a
/// last field holding the encoding of `tail` (like [`save_with_bytes`] with the bytes of
/// `codec::encode(tail)`), encoding `tail` straight into the file: a snapshot of a large
/// state never sits in memory encoded. `tail_len` and `tail_crc` are that encoding's length
/// and CRC32C ([`codec::encoded_len_and_checksum`]), needed up front for the headers; if
/// `tail` encodes to anything else this time, the write fails and `name` is left as it was.
pub fn save_streamed<T: Serialize, U: Serialize>(
    dir: &dyn Dir,
    name: &str,
    magic: &[u8; 8],
    head: &T,
    tail: &U,
    (tail_len, tail_crc): (usize, u32),
) -> Result<(), StoreError> {
    let refused = |reason: String| StoreError::corrupt(dir.describe(name), 0, reason);
    let before = codec::encode_before_bytes(head, tail_len).map_err(|e| refused(e.to_string()))?;
    let header = codec::frame_header_with_tail(&before, tail_len, tail_crc).ok_or_else(|| {
        refused(format!(
            "a value of {tail_len} bytes is larger than a file holds ({} bytes)",
            codec::MAX_FRAME_PAYLOAD
        ))
    })?;
    write_atomically_with(dir, name, |out| {
        out.write_all(magic)?;
        out.write_all(&FILE_FORMAT.to_le_bytes())?;
        out.write_all(&header)?;
        out.write_all(&before)?;
        let mut checked = codec::Checksummed::new(out);
        codec::encode_to_writer(tail, &mut checked).map_err(std::io::Error::other)?;
        if (checked.len(), checked.checksum()) != (tail_len, tail_crc) {
            return Err(std::io::Error::other(
                "the value encoded differently the second time",
            ));
        }
        Ok(())
    })
    .map_err(|e| StoreError::io(dir.describe(name), e))
}

/// The file: magic, format, then one frame whose payload is `payload` joined.
fn write_payload(
    dir: &dyn Dir,
    name: &str,
    magic: &[u8; 8],
    payload: &[&[u8]],
) -> Result<(), StoreError> {
    let mut prefix = Vec::with_capacity(PREFIX_LEN + codec::FRAME_HEADER_LEN);
    prefix.extend_from_slice(magic);
    prefix.extend_from_slice(&FILE_FORMAT.to_le_bytes());
    prefix.extend_from_slice(&codec::frame_header(payload));
    let parts: Vec<&[u8]> = std::iter::once(&prefix[..])
        .chain(payload.iter().copied())
        .collect();
    write_atomically(dir, name, &parts).map_err(|e| StoreError::io(dir.describe(name), e))
}

/// Reads the value in `name`, `None` if the file does not exist. A file that exists but is not
/// whole, not ours or not this format is an error naming it.
pub fn load<T: DeserializeOwned>(
    dir: &dyn Dir,
    name: &str,
    magic: &[u8; 8],
) -> Result<Option<T>, StoreError> {
    let file = dir.describe(name);
    let Some(bytes) = dir.read(name).map_err(|e| StoreError::io(&file, e))? else {
        return Ok(None);
    };
    if bytes.len() < PREFIX_LEN || &bytes[..8] != magic {
        return Err(StoreError::Foreign {
            file,
            reason: format!(
                "not a raftlock {} file (wrong magic)",
                String::from_utf8_lossy(magic).trim()
            ),
        });
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if format != FILE_FORMAT {
        return Err(StoreError::Foreign {
            file,
            reason: format!(
                "file format {format}, this release reads format {FILE_FORMAT}; run a release \
                 that reads it"
            ),
        });
    }
    match codec::read_frame(&bytes, PREFIX_LEN) {
        FrameRead::Frame { payload, next } if next == bytes.len() => codec::decode(payload)
            .map(Some)
            .map_err(|e| StoreError::corrupt(file, PREFIX_LEN as u64, e.to_string())),
        FrameRead::Frame { next, .. } => Err(StoreError::corrupt(
            file,
            next as u64,
            "trailing bytes after the value",
        )),
        FrameRead::End => Err(StoreError::corrupt(file, PREFIX_LEN as u64, "no value")),
        FrameRead::Bad { reason, .. } => Err(StoreError::corrupt(file, PREFIX_LEN as u64, reason)),
    }
}
