//! Request bodies: bounded reading (64 KiB, else 413) and JSON decoding whose failures become
//! 400s in the caller's dialect. Wrong types are refused, and so are unknown fields where the
//! request type says `deny_unknown_fields` (the §4 and §5 bodies do).

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::errors::{ApiError, Dialect};

/// Largest accepted request body.
pub const MAX_BODY: usize = 64 * 1024;

/// Reads the whole body, refusing more than [`MAX_BODY`] bytes with 413.
pub async fn read(body: Body, d: Dialect) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::new(
            d,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds {MAX_BODY} bytes"),
        )
    })
}

/// Decodes a JSON body; an empty body is decoded as `{}`.
pub fn json<T: DeserializeOwned>(bytes: &[u8], d: Dialect) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    // The path of the offending field makes the message name it (`lock_name: invalid type…`).
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = match path.as_str() {
            "." | "" => format!("invalid JSON body: {inner}"),
            field => format!("invalid JSON body: {field}: {inner}"),
        };
        ApiError::bad_request(d, message)
    })?;
    de.end()
        .map_err(|e| ApiError::bad_request(d, format!("invalid JSON body: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Ttl {
        ttl_seconds: u64,
    }

    #[test]
    fn decoding() {
        assert_eq!(
            json::<Ttl>(br#"{"ttl_seconds":10,"extra":1}"#, Dialect::Locks)
                .unwrap()
                .ttl_seconds,
            10
        );
        for bad in [
            &br#"{"ttl_seconds":"10"}"#[..],
            br#"{"ttl_seconds":-1}"#,
            b"{",
            b"",
            br#"{"ttl_seconds":1.5}"#,
            br#"{"ttl_seconds":10} trailing"#,
        ] {
            let e = json::<Ttl>(bad, Dialect::Locks).unwrap_err();
            assert_eq!(
                (e.status, e.code),
                (StatusCode::BAD_REQUEST, "invalid_request")
            );
        }
    }

    #[test]
    fn messages_name_the_offending_field() {
        let e = json::<Ttl>(br#"{"ttl_seconds":"x"}"#, Dialect::Rpc).unwrap_err();
        assert!(e.message.contains("ttl_seconds"), "{}", e.message);
        assert_eq!(e.code, "invalid_argument");
    }

    #[tokio::test]
    async fn oversized_bodies_are_413() {
        let e = read(Body::from(vec![b' '; MAX_BODY + 1]), Dialect::Rpc)
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            read(Body::from(vec![b' '; MAX_BODY]), Dialect::Rpc)
                .await
                .unwrap()
                .len(),
            MAX_BODY
        );
    }
}
