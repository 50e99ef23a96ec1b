//! One kept-alive HTTP/1.1 connection per simulated client, straight on hyper (no pool, no
//! per-request allocation beyond the request itself), so the load generator stays cheap next
//! to three server processes on a small machine. With [`use_tls`], every connection is
//! HTTPS (rustls), to measure what TLS costs raftlock.

use std::time::Duration;

use anyhow::{anyhow, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The TLS connector every new connection uses, when set by [`use_tls`].
static TLS: std::sync::OnceLock<tokio_rustls::TlsConnector> = std::sync::OnceLock::new();

/// Makes every connection from now on HTTPS, trusting only the CA certificate(s) in `pem`.
pub fn use_tls(pem: &[u8]) -> anyhow::Result<()> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots.add(cert?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    TLS.set(tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        config,
    )))
    .map_err(|_| anyhow!("TLS already configured"))
}

/// A client connection to `addr`, re-established on the next call after it breaks.
pub struct Conn {
    addr: String,
    auth: Option<String>,
    sender: Option<SendRequest<Full<Bytes>>>,
}

/// Extra request header (name, value).
pub type Header<'a> = (&'static str, &'a str);

impl Conn {
    pub fn new(addr: &str, bearer: Option<&str>) -> Self {
        Conn {
            addr: addr.to_string(),
            auth: bearer.map(|b| format!("Bearer {b}")),
            sender: None,
        }
    }

    async fn connect(&mut self) -> anyhow::Result<&mut SendRequest<Full<Bytes>>> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            let stream = tokio::time::timeout(
                Duration::from_secs(5),
                TcpStream::connect(self.addr.as_str()),
            )
            .await
            .map_err(|_| anyhow!("connecting to {}: timed out", self.addr))?
            .with_context(|| format!("connecting to {}", self.addr))?;
            stream.set_nodelay(true)?;
            let sender = match TLS.get() {
                None => {
                    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
                    tokio::spawn(conn);
                    sender
                }
                Some(tls) => {
                    let host = self
                        .addr
                        .rsplit_once(':')
                        .map_or(self.addr.as_str(), |(h, _)| h);
                    let name = rustls::pki_types::ServerName::try_from(host.to_string())?;
                    let stream = tls.connect(name, stream).await?;
                    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
                    tokio::spawn(conn);
                    sender
                }
            };
            self.sender = Some(sender);
        }
        Ok(self.sender.as_mut().expect("just set"))
    }

    /// Sends one request and reads the whole answer. A transport error drops the connection
    /// (the next call reconnects) and is returned.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        headers: &[Header<'_>],
        body: impl Into<Bytes>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let host = self.addr.clone();
        let auth = self.auth.clone();
        let body = body.into();
        let result = async {
            let sender = self.connect().await?;
            sender.ready().await?;
            let mut req = Request::builder()
                .method(method)
                .uri(path)
                .header(hyper::header::HOST, host);
            if let Some(a) = &auth {
                req = req.header(hyper::header::AUTHORIZATION, a.as_str());
            }
            if !body.is_empty() {
                req = req.header(hyper::header::CONTENT_TYPE, "application/json");
            }
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            let res = sender.send_request(req.body(Full::new(body))?).await?;
            let status = res.status();
            let bytes = res.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, bytes))
        }
        .await;
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    /// [`Conn::call`] with a JSON body, expecting a JSON answer.
    pub async fn json(
        &mut self,
        method: Method,
        path: &str,
        headers: &[Header<'_>],
        body: &serde_json::Value,
    ) -> anyhow::Result<(StatusCode, serde_json::Value)> {
        let (status, bytes) = self
            .call(method, path, headers, serde_json::to_vec(body)?)
            .await?;
        let value = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
            })
        };
        Ok((status, value))
    }
}
