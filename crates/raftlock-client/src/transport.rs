//! [`Client`], its builder, and the one place requests are sent: endpoint failover, request
//! ids, retry policy and error decoding.
//!
//! Failover rules:
//! * A connection that could not be made (refused, DNS, connect timeout) never reached a
//!   server, so the next endpoint is tried freely.
//! * A `503`, or a transport failure after the request was sent, is *uncertain*: the server
//!   may have applied it. Idempotent calls go on to the next endpoint until the failover
//!   budget is spent: reads; writes whose repeat is harmless (project-lock acquire with the same token,
//!   renew; hierarchical refresh); and every write the server applies once per request id (project-lock
//!   release, hierarchical creates, updates, deletes, revokes, releases — a repeat within the server's
//!   window gets the first outcome). Calls marked [`Retry::Once`] are retried once.
//! * Every attempt of one logical call carries the same `X-Volcano-Request-Id`.
//! * A `503` with [`OUTCOME_UNKNOWN_HEADER`] is returned at once, never retried: the cluster
//!   refused a resend of the write because it could no longer tell whether the first attempt
//!   was applied, and a retry might apply it twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;

use crate::error::{ApiError, Error, Result};

pub use raftlock_api::headers::{LOCK_TOKEN_HEADER, OUTCOME_UNKNOWN_HEADER, REQUEST_ID_HEADER};

/// A handle on a raftlock cluster: several endpoints and one credential.
///
/// Cheap to clone (an `Arc` inside); share one per process.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) endpoints: Vec<String>,
    pub(crate) token: String,
    /// Index of the endpoint that answered last; calls start there.
    preferred: AtomicUsize,
    pub(crate) request_timeout: Duration,
    pub(crate) failover_budget: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.inner.endpoints)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    /// Node addresses: `host:port` or `http(s)://host:port`.
    endpoints: Vec<String>,
    /// Bearer credential: a project key for lock-API, the platform token for admin calls.
    token: String,
    /// Timeout of one HTTP attempt (blocking acquires add their own wait to it).
    request_timeout: Duration,
    /// Timeout for establishing a connection.
    connect_timeout: Duration,
    /// How long one idempotent call keeps failing over before giving up.
    failover_budget: Duration,
    /// PEM CA certificate(s) trusted for `https://` endpoints, besides the built-in roots
    /// (a cluster with its own CA). Hostnames are always verified.
    ca_pem: Option<Vec<u8>>,
}

impl ClientBuilder {
    /// Sets the endpoints (replacing any set before).
    pub fn endpoints<I, S>(mut self, endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the bearer credential.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = token.into();
        self
    }

    /// Timeout of one HTTP attempt (default 3 s: every node answers within its commit
    /// timeout, 2 s by default, even while the leader changes; a node that does not is itself
    /// stuck, and the next endpoint is tried).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// Connect timeout (default 2 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long an idempotent call keeps trying other endpoints (default 10 s).
    pub fn failover_budget(mut self, d: Duration) -> Self {
        self.failover_budget = d;
        self
    }

    /// Trusts the CA certificate(s) in `pem` for `https://` endpoints (the cluster's own CA).
    pub fn ca_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Validates the settings and builds the client.
    pub fn build(self) -> Result<Client> {
        let endpoints: Vec<String> = self
            .endpoints
            .iter()
            .flat_map(|e| e.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(normalize_endpoint)
            .collect::<Result<_>>()?;
        if endpoints.is_empty() {
            return Err(Error::Config("no endpoints given".into()));
        }
        HeaderValue::from_str(&format!("Bearer {}", self.token)).map_err(|_| {
            Error::Config("the key contains characters not allowed in a header".into())
        })?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            // Servers close idle connections after 10 s; let go of them first.
            .pool_idle_timeout(Duration::from_secs(5));
        if let Some(pem) = &self.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::Config(format!("CA certificate: {e}")))?;
            if certs.is_empty() {
                return Err(Error::Config(
                    "CA certificate: no PEM certificate found".into(),
                ));
            }
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http
            .build()
            .map_err(|e| Error::Config(format!("HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                endpoints,
                token: self.token,
                preferred: AtomicUsize::new(0),
                request_timeout: self.request_timeout,
                failover_budget: self.failover_budget,
            }),
        })
    }
}

fn normalize_endpoint(e: &str) -> Result<String> {
    let url = if e.starts_with("http://") || e.starts_with("https://") {
        e.trim_end_matches('/').to_string()
    } else {
        format!("http://{}", e.trim_end_matches('/'))
    };
    reqwest::Url::parse(&url).map_err(|err| Error::Config(format!("endpoint {e:?}: {err}")))?;
    Ok(url)
}

/// How a call may be repeated after an uncertain failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Safe to repeat: fail over until the budget is spent.
    Idempotent,
    /// Repeat once after an uncertain failure, with the same request id.
    Once,
}

/// One logical request.
pub(crate) struct Call {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    pub headers: Vec<(&'static str, String)>,
    pub retry: Retry,
    /// Extra time on top of the request timeout (blocking acquires).
    pub extra_timeout: Duration,
    /// Send to this endpoint only (health probes, per-node views).
    pub endpoint: Option<String>,
}

impl Call {
    pub fn new(method: Method, path: impl Into<String>) -> Call {
        Call {
            method,
            path: path.into(),
            body: None,
            headers: Vec::new(),
            retry: Retry::Idempotent,
            extra_timeout: Duration::ZERO,
            endpoint: None,
        }
    }
    pub fn json(mut self, body: Value) -> Call {
        self.body = Some(body);
        self
    }
    /// A typed request message of `raftlock-api` as the JSON body.
    pub fn message<T: serde::Serialize>(self, message: &T) -> Call {
        self.json(serde_json::to_value(message).expect("API messages serialize"))
    }
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Call {
        self.headers.push((name, value.into()));
        self
    }
    pub fn retry(mut self, retry: Retry) -> Call {
        self.retry = retry;
        self
    }
    pub fn extra_timeout(mut self, d: Duration) -> Call {
        self.extra_timeout = d;
        self
    }
}

/// A successful (2xx) answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub body: Vec<u8>,
    pub endpoint: String,
}

impl Reply {
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Protocol {
            endpoint: self.endpoint.clone(),
            message: format!("cannot decode answer: {e}"),
        })
    }
}

/// An attempt that ended without a 2xx answer.
enum Failure {
    /// Never reached a server.
    NotSent(Error),
    /// May have been applied (transport failure after sending, or 503).
    Uncertain(Error),
    /// A definite answer.
    Final(Error),
}

impl Client {
    /// Starts a builder with defaults (request timeout 10 s, connect timeout 2 s, failover
    /// budget 10 s).
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            endpoints: Vec::new(),
            token: String::new(),
            request_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(2),
            failover_budget: Duration::from_secs(10),
            ca_pem: None,
        }
    }

    /// A client with default settings.
    pub fn new<I, S>(endpoints: I, token: impl Into<String>) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder().endpoints(endpoints).token(token).build()
    }

    /// The normalized endpoints (`http://host:port`).
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// Sends one logical call, failing over as the module docs describe.
    pub(crate) async fn send(&self, call: Call) -> Result<Reply> {
        let request_id = call
            .headers
            .iter()
            .find(|(n, _)| *n == REQUEST_ID_HEADER)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        if let Some(endpoint) = &call.endpoint {
            return match self.attempt(endpoint, &call, &request_id).await {
                Ok(r) => Ok(r),
                Err(Failure::NotSent(e) | Failure::Uncertain(e) | Failure::Final(e)) => Err(e),
            };
        }
        let n = self.inner.endpoints.len();
        let start = self.inner.preferred.load(Ordering::Relaxed) % n;
        let give_up = Instant::now() + self.inner.failover_budget;
        let mut uncertain = 0u32;
        let mut backoff = Duration::from_millis(50);
        let mut i = 0usize;
        let mut round = 0usize;
        loop {
            let idx = (start + i) % n;
            let endpoint = &self.inner.endpoints[idx];
            let err = match self.attempt(endpoint, &call, &request_id).await {
                Ok(reply) => {
                    self.inner.preferred.store(idx, Ordering::Relaxed);
                    return Ok(reply);
                }
                Err(Failure::Final(e)) => return Err(e),
                Err(Failure::NotSent(e)) => e,
                Err(Failure::Uncertain(e)) => {
                    uncertain += 1;
                    if call.retry == Retry::Once && uncertain > 1 {
                        return Err(e);
                    }
                    e
                }
            };
            tracing::debug!(%endpoint, error = %err, "raftlock call failed, trying the next endpoint");
            i += 1;
            if Instant::now() >= give_up {
                return Err(err);
            }
            round += 1;
            if round == n {
                // Every endpoint failed once: give an election time to finish.
                round = 0;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }

    async fn attempt(
        &self,
        endpoint: &str,
        call: &Call,
        request_id: &str,
    ) -> std::result::Result<Reply, Failure> {
        let url = format!("{endpoint}{}", call.path);
        let mut req = self
            .inner
            .http
            .request(call.method.clone(), &url)
            .timeout(self.inner.request_timeout + call.extra_timeout)
            .header(REQUEST_ID_HEADER, request_id);
        if !self.inner.token.is_empty() {
            req = req.bearer_auth(&self.inner.token);
        }
        for (name, value) in &call.headers {
            if *name != REQUEST_ID_HEADER {
                req = req.header(*name, value);
            }
        }
        if let Some(body) = &call.body {
            req = req.json(body);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(source) => {
                let e = Error::Transport {
                    endpoint: endpoint.to_string(),
                    source,
                };
                let not_sent = matches!(&e, Error::Transport { source, .. } if source.is_connect());
                return Err(if not_sent {
                    Failure::NotSent(e)
                } else {
                    Failure::Uncertain(e)
                });
            }
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = match resp.bytes().await {
            Ok(b) => b.to_vec(),
            Err(source) => {
                return Err(Failure::Uncertain(Error::Transport {
                    endpoint: endpoint.to_string(),
                    source,
                }))
            }
        };
        if status.is_success() {
            return Ok(Reply {
                body,
                endpoint: endpoint.to_string(),
            });
        }
        Err(failure_of(Error::Api(api_error(
            endpoint, status, &headers, &body,
        ))))
    }

    /// A plain GET on one endpoint, without credential handling of the body: status and text.
    pub(crate) async fn probe(&self, endpoint: &str, path: &str) -> Result<(u16, String)> {
        let resp = self
            .inner
            .http
            .get(format!("{endpoint}{path}"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(|source| Error::Transport {
                endpoint: endpoint.to_string(),
                source,
            })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        Ok((status, text.trim().to_string()))
    }

    /// Sends a call to one given endpoint only (no failover).
    pub(crate) async fn send_to(&self, endpoint: &str, mut call: Call) -> Result<Reply> {
        call.endpoint = Some(endpoint.to_string());
        self.send(call).await
    }
}

/// Decodes an error answer of either dialect: `{"error","code"}` or `{"code","message"}`.
fn api_error(endpoint: &str, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> ApiError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let code = field("code").unwrap_or_else(|| {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_lowercase()
            .replace(' ', "_")
    });
    let message = field("error")
        .or_else(|| field("message"))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let retry_after = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let request_id = headers
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    ApiError {
        status: status.as_u16(),
        code,
        message,
        retry_after,
        request_id,
        endpoint: endpoint.to_string(),
        outcome_unknown: headers.contains_key(OUTCOME_UNKNOWN_HEADER),
    }
}

/// How an error answer counts for failover: a `503` is uncertain (the call may go on), except
/// one the cluster marks as beyond its knowing ([`Error::is_outcome_unknown`]): a retry under
/// the same request id could apply the write twice, so the caller gets it now.
fn failure_of(e: Error) -> Failure {
    if e.is_unavailable() {
        Failure::Uncertain(e)
    } else {
        Failure::Final(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_503_whose_outcome_the_cluster_cannot_tell_is_final() {
        let answer = |status, headers: &HeaderMap| {
            failure_of(Error::Api(api_error("e", status, headers, b"{}")))
        };
        let plain = answer(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new());
        assert!(matches!(plain, Failure::Uncertain(_)));
        let mut h = HeaderMap::new();
        h.insert(OUTCOME_UNKNOWN_HEADER, HeaderValue::from_static("true"));
        let unknown = answer(StatusCode::SERVICE_UNAVAILABLE, &h);
        assert!(
            matches!(&unknown, Failure::Final(e) if e.is_outcome_unknown() && !e.is_unavailable())
        );
        let refused = answer(StatusCode::CONFLICT, &HeaderMap::new());
        assert!(matches!(refused, Failure::Final(_)));
    }

    #[test]
    fn endpoints_are_normalized_and_split() {
        let c = Client::new(["127.0.0.1:7001,http://h:7002/", " https://x:1 "], "k").unwrap();
        assert_eq!(
            c.endpoints(),
            ["http://127.0.0.1:7001", "http://h:7002", "https://x:1"]
        );
        assert!(matches!(
            Client::new(Vec::<String>::new(), "k"),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn both_error_dialects_decode() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        let e = api_error(
            "e",
            StatusCode::TOO_MANY_REQUESTS,
            &h,
            br#"{"error":"slow down","code":"lock_rate_limited"}"#,
        );
        assert_eq!(e.code, "lock_rate_limited");
        assert_eq!(e.message, "slow down");
        assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
        let e = api_error(
            "e",
            StatusCode::NOT_FOUND,
            &HeaderMap::new(),
            br#"{"code":"not_found","message":"no such namespace"}"#,
        );
        assert_eq!((e.status, e.code.as_str()), (404, "not_found"));
        assert_eq!(e.message, "no such namespace");
        let e = api_error("e", StatusCode::BAD_GATEWAY, &HeaderMap::new(), b"oops");
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("bad_gateway", "oops")
        );
    }
}
