//! The single encoding of raftlock: bincode 2 through its serde support.
//!
//! Log entries, snapshots and node-to-node messages all go through these two functions, so
//! switching the format is a change to this file alone.

use serde::{de::DeserializeOwned, Serialize};

/// The bincode configuration used everywhere. Fixed-width integers keep the format simple to
/// reason about; the default (little-endian, varint) would also do.
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

#[cfg(test)]
mod tests {
    use super::*;

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
