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

/// Deserializes bytes produced by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, _read) = bincode::serde::decode_from_slice(bytes, config())?;
    Ok(value)
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
    let len = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&frame_checksum(len, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The CRC32C of the length field and the payload: covering the length means a run of zero
/// bytes (a page the disk never wrote) is not a valid empty frame.
fn frame_checksum(len: [u8; 4], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len), payload)
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
    if frame_checksum(rest[0..4].try_into().expect("4 bytes"), payload) != crc {
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
    use super::*;

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
