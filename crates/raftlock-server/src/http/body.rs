//! Request input: bounded body reading (64 KiB, else 413), JSON decoding and path parameters,
//! whose failures become JSON 400s in the caller's dialect. Wrong types are refused, and so are unknown fields where the
//! request type says `deny_unknown_fields` (the project-lock and hierarchical bodies do).

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::errors::{ApiError, Dialect};

/// A path parameter whose malformed value (an id that is not a number, bad percent-encoding)
/// is a JSON 400 in the route's dialect, not axum's plain-text rejection.
pub struct PathParam<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParam<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let d = Dialect::of_path(parts.uri.path());
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(PathParam(value)),
            Err(e) => Err(ApiError::bad_request(d, format!("path: {}", e.body_text()))),
        }
    }
}

/// Largest accepted request body.
pub const MAX_BODY: usize = 64 * 1024;

/// How long a request body may take to arrive, once its head is in. A client that declares a
/// body and trickles it (a byte every few seconds) would otherwise hold its connection, and
/// one of the node's `--max-connections`, for as long as it likes; past this it is answered
/// `408` and the connection closed. 64 KiB at most arrive well within it on any network.
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The error a [`Deadline`] body fails with once its deadline has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("request body not received within the deadline")]
pub struct BodyTimedOut;

/// A request body that fails ([`BodyTimedOut`]) when it has not all arrived by a deadline.
/// The router wraps every request's body in one ([`with_deadline`]), counted from the
/// request head's arrival, so no reader of a body — [`read`], an extractor, a handler that
/// streams — can be held by a client that trickles it.
pub struct Deadline {
    inner: Body,
    deadline: tokio::time::Instant,
    /// Made at the first read that has to wait (most bodies are in at once).
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

/// `req` with its body bound to arrive within [`BODY_READ_TIMEOUT`] from now; a request
/// without a body is left as it is.
pub fn with_deadline(req: axum::extract::Request) -> axum::extract::Request {
    bound(req, BODY_READ_TIMEOUT)
}

fn bound(req: axum::extract::Request, within: std::time::Duration) -> axum::extract::Request {
    use hyper::body::Body as _;
    if req.body().is_end_stream() {
        return req;
    }
    let deadline = tokio::time::Instant::now() + within;
    req.map(|inner| {
        Body::new(Deadline {
            inner,
            deadline,
            sleep: None,
        })
    })
}

impl hyper::body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        use std::future::Future;
        use std::task::Poll;
        let this = self.get_mut();
        if let Poll::Ready(frame) = std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `error` (or one it wraps) is `E`.
fn caused_by<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<E>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The `408` of a body that did not arrive in time; the connection is closed after it.
fn timed_out(d: Dialect) -> ApiError {
    metrics::counter!("raftlock_slow_bodies_shed_total").increment(1);
    ApiError::new(
        d,
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "request body not received within {} s",
            BODY_READ_TIMEOUT.as_secs()
        ),
    )
    .closing()
}

/// Reads the whole body, refusing more than [`MAX_BODY`] bytes with 413 and a body that does
/// not arrive within [`BODY_READ_TIMEOUT`] (of its head, when the router bound it with
/// [`with_deadline`]; of this call otherwise) with 408.
pub async fn read(body: Body, d: Dialect) -> Result<Bytes, ApiError> {
    let read = axum::body::to_bytes(body, MAX_BODY);
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if caused_by::<BodyTimedOut>(&e) => Err(timed_out(d)),
        // Past MAX_BODY (or a body that broke off: its connection cannot go on either way).
        Ok(Err(_)) => Err(ApiError::new(
            d,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds {MAX_BODY} bytes"),
        )),
        Err(_) => Err(timed_out(d)),
    }
}

/// Decodes a JSON body; an empty body is decoded as `{}`. A number with a zero fraction
/// (`60.0`) is accepted where an integer is expected: JSON does not tell them apart (JSON
/// Schema calls `60.0` an integer), and some encoders write every number that way.
pub fn json<T: DeserializeOwned>(bytes: &[u8], d: Dialect) -> Result<T, ApiError> {
    // No body at all is `{}` (every field at its default); a body of blanks is not JSON.
    let bytes: &[u8] = if bytes.is_empty() { b"{}" } else { bytes };
    // Every request body is an object: serde would also read a struct from an array of its
    // fields in order (`[null, null]`), which the document forbids and no client means.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request(
            d,
            "invalid JSON body: expected an object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let error = match serde_path_to_error::deserialize(&mut de) {
        Ok(value) => {
            de.end()
                .map_err(|e| ApiError::bad_request(d, format!("invalid JSON body: {e}")))?;
            return Ok(value);
        }
        Err(e) => e,
    };
    // Only a body that is valid JSON with integral floats gets a second chance (off the
    // fast path: well-formed requests decode above without building a tree).
    if let Ok(mut tree) = serde_json::from_slice::<serde_json::Value>(bytes) {
        if integral_floats_to_integers(&mut tree) {
            if let Ok(value) = serde_json::from_value(tree) {
                return Ok(value);
            }
        }
    }
    // The path of the offending field makes the message name it (`lock_name: invalid type…`).
    let path = error.path().to_string();
    let inner = error.into_inner();
    let message = match path.as_str() {
        "." | "" => format!("invalid JSON body: {inner}"),
        field => format!("invalid JSON body: {field}: {inner}"),
    };
    Err(ApiError::bad_request(d, message))
}

/// Rewrites every float with a zero fraction that an integer type can hold (`60.0` → `60`);
/// true when something changed.
fn integral_floats_to_integers(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            let integral = f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15;
            if integral {
                *v = Value::from(f as i64);
            }
            integral
        }
        // Every element is visited (not `any`, which would stop at the first change).
        Value::Array(items) => items
            .iter_mut()
            .map(integral_floats_to_integers)
            .fold(false, |a, b| a | b),
        Value::Object(map) => map
            .values_mut()
            .map(integral_floats_to_integers)
            .fold(false, |a, b| a | b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Ttl {
        ttl_seconds: u64,
    }

    #[test]
    fn integral_floats_are_integers() {
        for body in [
            &br#"{"ttl_seconds":60.0}"#[..],
            br#"{"ttl_seconds":6e1}"#,
            br#"{"ttl_seconds":60}"#,
        ] {
            let ttl = json::<Ttl>(body, Dialect::Locks).unwrap();
            assert_eq!(ttl.ttl_seconds, 60);
        }
    }

    /// A large integral float is read exactly: serde_json's default float parsing may be one
    /// unit in the last place off (`3636553719257210.0` read as `…209.5`, found by
    /// schemathesis), which made it look fractional and refused a valid request; the
    /// workspace enables its `float_roundtrip` parsing.
    #[test]
    fn large_integral_floats_are_read_exactly() {
        let body = br#"{"ttl_seconds":3636553719257210.0}"#;
        let ttl = json::<Ttl>(body, Dialect::Locks).unwrap();
        assert_eq!(ttl.ttl_seconds, 3_636_553_719_257_210);
    }

    #[derive(serde::Deserialize, Debug, Default)]
    struct Page {
        #[serde(default)]
        limit: u32,
    }

    #[test]
    fn no_body_is_an_empty_object_but_blanks_are_not_json() {
        assert_eq!(json::<Page>(b"", Dialect::Rpc).unwrap().limit, 0);
        assert_eq!(json::<Page>(b" {} ", Dialect::Rpc).unwrap().limit, 0);
        for blank in [&b" "[..], b"\n", b" \t "] {
            let e = json::<Page>(blank, Dialect::Rpc).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{blank:?}");
        }
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
            br#"{"ttl_seconds":-60.0}"#,
            br#"{"ttl_seconds":1e300}"#,
            br#"{"ttl_seconds":10} trailing"#,
            b"[10]",
            b" [10]",
            b"10",
            b"null",
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

    /// A body that sends `{` and then nothing.
    fn trickled() -> axum::extract::Request {
        use futures::StreamExt;
        let first = futures::stream::once(async { Ok::<_, std::io::Error>(Bytes::from("{")) });
        let body = Body::from_stream(first.chain(futures::stream::pending()));
        axum::extract::Request::new(body)
    }

    #[tokio::test]
    async fn a_body_bound_by_a_deadline_is_408_when_it_passes() {
        use std::time::{Duration, Instant};
        let req = bound(trickled(), Duration::from_millis(200));
        let started = Instant::now();
        let e = read(req.into_body(), Dialect::Rpc).await.unwrap_err();
        assert_eq!(
            (e.status, e.code, e.close),
            (StatusCode::REQUEST_TIMEOUT, "deadline_exceeded", true)
        );
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        // Any reader sees the deadline, not only `read`.
        let req = bound(trickled(), Duration::from_millis(50));
        let e = axum::body::to_bytes(req.into_body(), usize::MAX)
            .await
            .unwrap_err();
        assert!(caused_by::<BodyTimedOut>(&e), "{e}");
    }

    #[tokio::test]
    async fn a_body_in_time_is_read_whole() {
        let req = with_deadline(axum::extract::Request::new(Body::from("{\"a\":1}")));
        assert_eq!(
            &read(req.into_body(), Dialect::Locks).await.unwrap()[..],
            b"{\"a\":1}"
        );
        // No body, no wrapper.
        let req = with_deadline(axum::extract::Request::new(Body::empty()));
        assert!(read(req.into_body(), Dialect::Locks)
            .await
            .unwrap()
            .is_empty());
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
