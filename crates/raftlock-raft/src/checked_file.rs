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
use crate::fs::{write_atomically, write_atomically_with, write_atomically_with_head, Dir};

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
/// state never sits in memory encoded. Returns the length of `tail`'s encoding.
///
/// One encoding pass: the headers before the encoding hold its length and checksum, so they
/// are written last, over room left for them ([`write_atomically_with_head`]). That room
/// assumes the length field of an encoding of [`LONG_TAIL`] bytes or more; a shorter one is
/// written again with the headers known (a second pass over a small value). Measuring a
/// 1M-lock snapshot before writing it took 0.26–0.37 s of CPU of the 0.57–0.77 s it cost in
/// all (the soaks of 2026-12-04, git history of docs/benchmarks.md).
pub fn save_streamed<T: Serialize, U: Serialize>(
    dir: &dyn Dir,
    name: &str,
    magic: &[u8; 8],
    head: &T,
    tail: &U,
) -> Result<usize, StoreError> {
    let refused = |reason: String| StoreError::corrupt(dir.describe(name), 0, reason);
    let head = codec::encode(head).map_err(|e| refused(e.to_string()))?;
    let room = PREFIX_LEN + codec::FRAME_HEADER_LEN + head.len() + LONG_TAIL_LEN_FIELD;
    let mut measured = None;
    let written = write_atomically_with_head(dir, name, |out| {
        out.write_all(&vec![0; room])?;
        let mut checked = codec::Checksummed::new(out);
        codec::encode_to_writer(tail, &mut checked).map_err(std::io::Error::other)?;
        let tail_measured = (checked.len(), checked.checksum());
        measured = Some(tail_measured);
        let prefix = streamed_prefix(magic, &head, tail_measured)?;
        if prefix.len() != room {
            return Err(std::io::Error::other(
                "a short value: its headers do not fit",
            ));
        }
        Ok(prefix)
    });
    match (written, measured) {
        (Ok(()), Some((tail_len, _))) => Ok(tail_len),
        (Err(_), Some(tail_measured)) if tail_measured.0 < LONG_TAIL => {
            save_measured(dir, name, magic, &head, tail, tail_measured)?;
            Ok(tail_measured.0)
        }
        (Err(e), _) => Err(StoreError::io(dir.describe(name), e)),
        (Ok(()), None) => unreachable!("the headers are made after measuring"),
    }
}

/// The shortest encoding [`save_streamed`] writes in one pass: bincode's length field of a
/// sequence is one marker byte and a `u32` ([`LONG_TAIL_LEN_FIELD`] bytes) from 64 KiB up to
/// 4 GiB, past the largest frame ([`codec::MAX_FRAME_PAYLOAD`]).
pub const LONG_TAIL: usize = 1 << 16;
const LONG_TAIL_LEN_FIELD: usize = 5;

/// What a streamed file holds before the encoding of its tail: magic, format, the frame's
/// header, the encoded `head` and the tail's length field.
fn streamed_prefix(
    magic: &[u8; 8],
    head: &[u8],
    (tail_len, tail_crc): (usize, u32),
) -> std::io::Result<Vec<u8>> {
    let len_field = codec::encode_bytes_len(tail_len).map_err(std::io::Error::other)?;
    let before = [head, &len_field].concat();
    let header = codec::frame_header_with_tail(&before, tail_len, tail_crc).ok_or_else(|| {
        std::io::Error::other(format!(
            "a value of {tail_len} bytes is larger than a file holds ({} bytes)",
            codec::MAX_FRAME_PAYLOAD
        ))
    })?;
    let mut prefix = Vec::with_capacity(PREFIX_LEN + header.len() + before.len());
    prefix.extend_from_slice(magic);
    prefix.extend_from_slice(&FILE_FORMAT.to_le_bytes());
    prefix.extend_from_slice(&header);
    prefix.extend_from_slice(&before);
    Ok(prefix)
}

/// [`save_streamed`] of a tail whose encoding's length and CRC32C are known: the headers first,
/// then the encoding, which must come out the same again.
fn save_measured<U: Serialize>(
    dir: &dyn Dir,
    name: &str,
    magic: &[u8; 8],
    head: &[u8],
    tail: &U,
    measured: (usize, u32),
) -> Result<(), StoreError> {
    write_atomically_with(dir, name, |out| {
        out.write_all(&streamed_prefix(magic, head, measured)?)?;
        let mut checked = codec::Checksummed::new(out);
        codec::encode_to_writer(tail, &mut checked).map_err(std::io::Error::other)?;
        if (checked.len(), checked.checksum()) != measured {
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

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde::Serializer;

    use super::*;
    use crate::sim_fs::{Rng, SimDir};

    const MAGIC: &[u8; 8] = b"RLTEST01";

    /// A value that counts how often it is encoded.
    struct Counted {
        bytes: Vec<u8>,
        encodings: Cell<usize>,
    }

    impl Counted {
        fn new(len: usize) -> Self {
            Counted {
                bytes: (0..len).map(|i| (i * 7 + 3) as u8).collect(),
                encodings: Cell::new(0),
            }
        }
    }

    impl Serialize for Counted {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.encodings.set(self.encodings.get() + 1);
            self.bytes.serialize(s)
        }
    }

    fn head() -> (String, u64) {
        ("snapshot 7-42".to_string(), 42)
    }

    /// Values whose encodings (a length field, then the bytes) lie on both sides of each
    /// change of the width of the file's field for that encoding's length (1, 3, 5 bytes from
    /// 0, 251, [`LONG_TAIL`]): 249 bytes encode to 250, 250 to 251, `LONG_TAIL - 4` to
    /// `LONG_TAIL - 1`, `LONG_TAIL - 3` to `LONG_TAIL`; and one over several sync chunks.
    const SIZES: [usize; 8] = [
        0,
        249,
        250,
        LONG_TAIL - 4,
        LONG_TAIL - 3,
        65_536,
        70_000,
        2_500_000,
    ];

    #[test]
    fn a_streamed_value_is_the_file_saved_from_its_encoded_bytes() {
        for len in SIZES {
            let tail = Counted::new(len);
            let streamed = SimDir::new();
            let tail_len = save_streamed(&streamed, "f", MAGIC, &head(), &tail).unwrap();
            let from_bytes = SimDir::new();
            let encoded = codec::encode(&tail.bytes).unwrap();
            save_with_bytes(&from_bytes, "f", MAGIC, &head(), &encoded).unwrap();

            assert_eq!(tail_len, encoded.len(), "{len} bytes");
            assert!(
                streamed.read("f").unwrap() == from_bytes.read("f").unwrap(),
                "{len} bytes: the files differ"
            );
            let (name, at, bytes): (String, u64, Vec<u8>) =
                load(&streamed, "f", MAGIC).unwrap().unwrap();
            assert_eq!((name, at), head());
            assert!(bytes == encoded, "{len} bytes: read back differently");
            assert_eq!(streamed.list().unwrap(), ["f"], "{len} bytes: a file left");
        }
    }

    #[test]
    fn a_long_value_is_encoded_once_and_a_short_one_twice() {
        for len in SIZES {
            let tail = Counted::new(len);
            save_streamed(&SimDir::new(), "f", MAGIC, &head(), &tail).unwrap();
            let encoded_len = codec::encode(&tail.bytes).unwrap().len();
            let expected = if encoded_len >= LONG_TAIL { 1 } else { 2 };
            assert_eq!(
                tail.encodings.get(),
                expected,
                "{len} bytes ({encoded_len} encoded)"
            );
        }
    }

    #[test]
    fn a_power_cut_anywhere_in_a_streamed_save_leaves_the_old_value_or_the_new_one() {
        let old = Counted::new(70_000);
        let new = Counted::new(1_100_000);
        let mut rng = Rng::new(4);
        let mut outcomes = std::collections::BTreeSet::new();
        for fuel in 0..16 {
            for _ in 0..4 {
                let dir = SimDir::new();
                save_streamed(&dir, "f", MAGIC, &head(), &old).unwrap();
                dir.fail_after(fuel);
                let finished = save_streamed(&dir, "f", MAGIC, &head(), &new).is_ok();
                outcomes.insert(finished);
                dir.power_cut(&mut rng);
                let (_, _, kept): (String, u64, Vec<u8>) = load(&dir, "f", MAGIC)
                    .unwrap_or_else(|e| panic!("fuel {fuel}: {e}"))
                    .expect("a file");
                let kept: Vec<u8> = codec::decode(&kept).unwrap();
                assert!(
                    kept == old.bytes || kept == new.bytes,
                    "fuel {fuel}: neither value"
                );
                assert!(
                    !finished || kept == new.bytes,
                    "fuel {fuel}: a finished save lost"
                );
            }
        }
        assert_eq!(outcomes.len(), 2, "cut in every step, and past the last");
    }
}
