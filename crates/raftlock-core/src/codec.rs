//! The single encoding of raftlock: bincode 2 through its serde support.
//!
//! Log entries, snapshots and node-to-node messages all go through [`encode`]/[`decode`], and
//! every byte that reaches a disk is wrapped in a checksummed frame ([`frame`]/[`read_frame`]),
//! so switching the format is a change to this file alone.

use serde::{de::DeserializeOwned, Serialize};

/// The bincode configuration used everywhere: bincode 2's standard one (little-endian,
/// variable-length integers). Changing it changes every byte on disk and on the wire, so
/// it would need a new state format (see `raftlock-raft`'s `STATE_FORMAT`).
fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Failure to encode or decode bytes.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    #[error("decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
}

/// Serializes any serde value into bytes.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

/// The length of [`encode`]'s bytes for `value`, counted without making them.
pub fn encoded_len<T: Serialize>(value: &T) -> Result<usize, CodecError> {
    let mut counter = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut counter, config())?;
    Ok(counter.bytes_written)
}

/// The CRC32C of [`encode`]'s bytes for `value`, computed as they are made (no buffer).
pub fn checksum_of<T: Serialize>(value: &T) -> Result<u32, CodecError> {
    let mut summed = Checksummed::new(std::io::sink());
    bincode::serde::encode_into_std_write(value, &mut summed, config())?;
    Ok(summed.checksum())
}

/// [`encode`] into `out` as it goes, never holding the whole encoding (a snapshot of a large
/// state is ~100 MB); returns its length. `out` is written in pieces of up to
/// [`WRITER_BUFFER_BYTES`]: the encoder writes each field on its own, a few bytes at a time,
/// and a checksum or file write per field cost a snapshot several times the encoding itself.
pub fn encode_to_writer<T: Serialize>(
    value: &T,
    out: &mut impl std::io::Write,
) -> Result<usize, CodecError> {
    let mut buffered = std::io::BufWriter::with_capacity(WRITER_BUFFER_BYTES, out);
    let len = bincode::serde::encode_into_std_write(value, &mut buffered, config())?;
    std::io::Write::flush(&mut buffered).map_err(|e| bincode::error::EncodeError::Io {
        inner: e,
        index: len,
    })?;
    Ok(len)
}

/// The pieces [`encode_to_writer`] writes.
pub const WRITER_BUFFER_BYTES: usize = 64 * 1024;

/// A writer that passes bytes on and keeps their count and CRC32C.
pub struct Checksummed<W> {
    inner: W,
    len: usize,
    crc: u32,
}

impl<W> Checksummed<W> {
    /// Nothing written yet.
    pub fn new(inner: W) -> Self {
        Checksummed {
            inner,
            len: 0,
            crc: 0,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The CRC32C of the bytes written so far.
    pub fn checksum(&self) -> u32 {
        self.crc
    }
}

impl<W: std::io::Write> std::io::Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.len += n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The encoding of a value whose last field is a byte vector of `bytes_len` bytes and whose
/// other fields are `head`, up to where those bytes start: this, then the bytes, is exactly
/// [`encode`] of the whole value. Lets a large byte field be written out where it lies.
pub fn encode_before_bytes<T: Serialize>(
    head: &T,
    bytes_len: usize,
) -> Result<Vec<u8>, CodecError> {
    let mut out = encode(head)?;
    out.extend(encode_bytes_len(bytes_len)?);
    Ok(out)
}

/// The length field in front of a byte vector of `bytes_len` bytes: what follows a value's
/// other fields in [`encode_before_bytes`], for a caller that encoded those fields itself.
pub fn encode_bytes_len(bytes_len: usize) -> Result<Vec<u8>, CodecError> {
    // A byte vector is a sequence: its length as a u64, then one byte per element.
    encode(&(bytes_len as u64))
}

/// Deserializes bytes produced by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, _read) = bincode::serde::decode_from_slice(bytes, config())?;
    Ok(value)
}

/// `#[serde(with = "codec::bytes")]` for a `Vec<u8>` field (an encoded state inside a
/// snapshot file): encoded exactly as serde encodes any `Vec<u8>` (its length, then the
/// bytes), but decoded in one copy. Serde's `Vec<u8>` decodes byte by byte, and for a 50 MB
/// snapshot that was a sixth of a restart's CPU.
pub mod bytes {
    use serde::de::{Deserializer, Error, SeqAccess, Visitor};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            // The hint comes from the input: trusted only up to a size any input could back.
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

/// Bytes in front of every frame's payload: its length and its CRC32C, both `u32`
/// little-endian.
pub const FRAME_HEADER_LEN: usize = 8;

/// The largest payload a frame may carry. A length field above it is damage, not data, so a
/// reader never tries to allocate or skip gigabytes because of one flipped bit.
pub const MAX_FRAME_PAYLOAD: usize = 1 << 30;

/// Wraps `payload` as `[len u32 LE][crc32c u32 LE][payload]`: the unit the write-ahead log
/// appends and the snapshot and vote files hold, so a torn or rotten write is always detected.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&frame_header(&[payload]));
    out.extend_from_slice(payload);
    out
}

/// The header of a frame whose payload is `parts` one after the other: written before the
/// parts, it makes the same bytes as [`frame`] of the joined payload, without joining it (a
/// snapshot's payload is ~100 MB).
pub fn frame_header(parts: &[&[u8]]) -> [u8; FRAME_HEADER_LEN] {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let len = (total as u32).to_le_bytes();
    let mut header = [0; FRAME_HEADER_LEN];
    header[..4].copy_from_slice(&len);
    header[4..].copy_from_slice(&frame_checksum(len, parts).to_le_bytes());
    header
}

/// The header of a frame whose payload is `head` followed by `tail_len` bytes with CRC32C
/// `tail_crc` ([`Checksummed`]): [`frame_header`] for a payload whose tail is not in memory.
/// `None` if the payload is larger than a frame may be ([`MAX_FRAME_PAYLOAD`]).
pub fn frame_header_with_tail(
    head: &[u8],
    tail_len: usize,
    tail_crc: u32,
) -> Option<[u8; FRAME_HEADER_LEN]> {
    let total = head.len().checked_add(tail_len)?;
    if total > MAX_FRAME_PAYLOAD {
        return None;
    }
    let len = (total as u32).to_le_bytes();
    let crc = crc32c::crc32c_combine(frame_checksum(len, &[head]), tail_crc, tail_len);
    let mut header = [0; FRAME_HEADER_LEN];
    header[..4].copy_from_slice(&len);
    header[4..].copy_from_slice(&crc.to_le_bytes());
    Some(header)
}

/// The CRC32C of the length field and the payload (given in `parts`, one after the other):
/// covering the length means a run of zero bytes (a page the disk never wrote) is not a
/// valid empty frame.
fn frame_checksum(len: [u8; 4], parts: &[&[u8]]) -> u32 {
    parts.iter().fold(crc32c::crc32c(&len), |crc, part| {
        crc32c::crc32c_append(crc, part)
    })
}

/// What [`read_frame`] found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameRead<'a> {
    /// A whole frame whose checksum matches; the next frame starts at `next`.
    Frame { payload: &'a [u8], next: usize },
    /// The offset is exactly the end of the buffer.
    End,
    /// Not a valid frame: too short for its header or its length, an impossible length, or a
    /// checksum mismatch. `len` is the payload length the header claims, if the header is whole.
    Bad {
        reason: &'static str,
        len: Option<usize>,
    },
}

/// Reads the frame starting at `at` in `buf`.
pub fn read_frame(buf: &[u8], at: usize) -> FrameRead<'_> {
    let rest = buf.get(at..).unwrap_or_default();
    if rest.is_empty() {
        return FrameRead::End;
    }
    if rest.len() < FRAME_HEADER_LEN {
        return FrameRead::Bad {
            reason: "truncated frame header",
            len: None,
        };
    }
    let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len > MAX_FRAME_PAYLOAD {
        return FrameRead::Bad {
            reason: "frame length out of range",
            len: None,
        };
    }
    let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
        return FrameRead::Bad {
            reason: "frame runs past the end of the file",
            len: Some(len),
        };
    };
    if frame_checksum(rest[0..4].try_into().expect("4 bytes"), &[payload]) != crc {
        return FrameRead::Bad {
            reason: "frame checksum mismatch",
            len: Some(len),
        };
    }
    FrameRead::Frame {
        payload,
        next: at + FRAME_HEADER_LEN + len,
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Plain {
        head: u64,
        data: Vec<u8>,
    }

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Bytes {
        head: u64,
        #[serde(with = "super::bytes")]
        data: Vec<u8>,
    }

    /// The request-id table stores fingerprints and sizes computed this way, and compares
    /// them with ones computed from a full encoding by earlier releases: they must agree.
    #[test]
    fn length_and_checksum_are_those_of_the_encoding() {
        for len in [0usize, 1, 127, 128, 70_000] {
            let value = Plain {
                head: len as u64 * 7919,
                data: (0..len).map(|i| (i * 31) as u8).collect(),
            };
            let bytes = super::encode(&value).unwrap();
            assert_eq!(super::encoded_len(&value).unwrap(), bytes.len());
            assert_eq!(super::checksum_of(&value).unwrap(), crc32c::crc32c(&bytes));
        }
    }

    #[test]
    fn bytes_encode_as_any_vec_of_bytes_and_decode_back() {
        for len in [0usize, 1, 250, 251, 70_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let plain = super::encode(&Plain {
                head: 9,
                data: data.clone(),
            })
            .unwrap();
            let bytes = super::encode(&Bytes {
                head: 9,
                data: data.clone(),
            })
            .unwrap();
            assert_eq!(plain, bytes, "{len} bytes");
            let back: Bytes = super::decode(&plain).unwrap();
            assert_eq!(back, Bytes { head: 9, data });
        }
    }

    use super::*;

    #[derive(Serialize)]
    struct WithBytes {
        name: String,
        at: u64,
        data: Vec<u8>,
    }

    #[test]
    fn a_value_encoded_in_parts_is_the_value_encoded_whole() {
        for len in [0usize, 1, 250, 251, 70_000] {
            let value = WithBytes {
                name: "meta".into(),
                at: 1 << 40,
                data: (0..len).map(|i| i as u8).collect(),
            };
            let mut parts = encode_before_bytes(&(&value.name, value.at), len).unwrap();
            let whole = encode(&value).unwrap();
            let header = frame_header(&[&parts, &value.data]);
            parts.extend_from_slice(&value.data);
            assert_eq!(parts, whole, "{len} bytes");
            assert_eq!(header[..], frame(&whole)[..FRAME_HEADER_LEN], "{len} bytes");
            let mut streamed = Vec::new();
            assert_eq!(
                encode_to_writer(&value, &mut streamed).unwrap(),
                whole.len()
            );
            assert_eq!(streamed, whole);
            let data_encoding = encode(&value.data).unwrap();
            let mut checked = Checksummed::new(std::io::sink());
            encode_to_writer(&value.data, &mut checked).unwrap();
            assert_eq!(checked.len(), data_encoding.len());
            assert_eq!(checked.checksum(), crc32c::crc32c(&data_encoding));
            let head = encode(&(&value.name, value.at)).unwrap();
            let tail = &whole[head.len()..];
            assert_eq!(
                frame_header_with_tail(&head, tail.len(), crc32c::crc32c(tail)),
                Some(header),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn frames_round_trip_and_damage_is_detected() {
        let mut buf = frame(b"hello");
        buf.extend(frame(b""));
        let FrameRead::Frame { payload, next } = read_frame(&buf, 0) else {
            panic!("first frame");
        };
        assert_eq!(payload, b"hello");
        assert!(matches!(
            read_frame(&buf, next),
            FrameRead::Frame { payload: b"", .. }
        ));
        assert_eq!(read_frame(&buf, buf.len()), FrameRead::End);
        let mut flipped = buf.clone();
        flipped[9] ^= 1;
        assert!(matches!(
            read_frame(&flipped, 0),
            FrameRead::Bad {
                reason: "frame checksum mismatch",
                ..
            }
        ));
        assert!(matches!(
            read_frame(&buf[..6], 0),
            FrameRead::Bad { len: None, .. }
        ));
        assert!(matches!(
            read_frame(&buf[..10], 0),
            FrameRead::Bad { len: Some(5), .. }
        ));
        assert!(
            matches!(read_frame(&[0u8; 16], 0), FrameRead::Bad { .. }),
            "zeros are no frame"
        );
    }

    #[test]
    fn round_trips_nested_values() {
        let value = (42u64, "x".to_string(), vec![Some(1i64), None]);
        let bytes = encode(&value).unwrap();
        assert_eq!(
            decode::<(u64, String, Vec<Option<i64>>)>(&bytes).unwrap(),
            value
        );
    }

    #[test]
    fn truncated_input_is_an_error() {
        let bytes = encode(&"hello".to_string()).unwrap();
        assert!(decode::<String>(&bytes[..2]).is_err());
    }
}
