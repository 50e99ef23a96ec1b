//! TLS for the client listener and mutual TLS between nodes (rustls with *ring*; no OpenSSL).
//!
//! - [`ServerTls`]: the rustls server configuration of one listener, built from PEM files.
//!   For the peer listener it also requires a client certificate signed by the peer CA
//!   (mutual TLS).
//! - [`PeerClientTls`]: the client side of node-to-node traffic: this node's certificate for
//!   client authentication and the peer CA as the only trusted root.
//! - Rotation: both follow their files. [`watch`] re-reads them when their modification time
//!   changes (checked every [`RELOAD_POLL`]) or on SIGHUP; new connections use the new
//!   certificates, open ones keep theirs. A file that does not load keeps the previous
//!   configuration and logs the error.
//!
//! At start every file must load: a missing, unreadable, expired or mismatched file stops
//! the node with one line naming the file and the problem.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How often certificate files are checked for a change.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);

/// The one crypto provider raftlock uses, named explicitly so no other provider linked into
/// the binary can make rustls' process default ambiguous.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The PEM files of one identity: a certificate chain and its private key, plus the CA that
/// peers' certificates must chain to (mutual TLS only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
}

impl TlsFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.ca.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }

    /// Modification times of every file, to notice a rotation.
    fn stamps(&self) -> Vec<Option<SystemTime>> {
        self.paths()
            .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
            .collect()
    }
}

fn load_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no PEM certificate in the file", path.display());
    }
    Ok(certs)
}

fn load_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| anyhow!("{}: {e}", path.display()))
}

fn load_roots(path: &Path) -> anyhow::Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| anyhow!("{}: not a usable CA certificate: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// A certificate chain and its key, checked to belong together and to be valid now.
fn certified_key(files: &TlsFiles) -> anyhow::Result<Arc<CertifiedKey>> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    check_validity(&files.cert, &certs[0])?;
    let key = CertifiedKey::from_der(certs, key, &provider())
        .map_err(|e| anyhow!("{} and {}: {e}", files.cert.display(), files.key.display()))?;
    Ok(Arc::new(key))
}

/// Refuses a certificate outside its validity period (a node serving an expired certificate
/// would only fail later, at every client's handshake).
fn check_validity(path: &Path, cert: &CertificateDer<'_>) -> anyhow::Result<()> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| anyhow!("{}: not an X.509 certificate: {e}", path.display()))?;
    let validity = parsed.validity();
    if !validity.is_valid() {
        bail!(
            "{}: certificate not valid now (valid from {} to {})",
            path.display(),
            validity.not_before,
            validity.not_after
        );
    }
    Ok(())
}

/// Something built from certificate files that follows them: rebuilt when they change, the
/// previous value kept while they do not load. Both TLS sides are one of these.
struct Followed<T> {
    files: TlsFiles,
    build: fn(&TlsFiles) -> anyhow::Result<T>,
    /// What it is, for the logs.
    what: &'static str,
    current: RwLock<Arc<T>>,
    /// Modification times of the files the current value was built from.
    stamps: std::sync::Mutex<Vec<Option<SystemTime>>>,
}

impl<T> Followed<T> {
    /// Builds from the files now; any problem is an error naming the file.
    fn load(
        files: TlsFiles,
        build: fn(&TlsFiles) -> anyhow::Result<T>,
        what: &'static str,
    ) -> anyhow::Result<Self> {
        let stamps = files.stamps();
        let value = build(&files)?;
        Ok(Followed {
            files,
            build,
            what,
            current: RwLock::new(Arc::new(value)),
            stamps: std::sync::Mutex::new(stamps),
        })
    }

    fn get(&self) -> Arc<T> {
        self.current.read().expect("not poisoned").clone()
    }

    /// Rebuilds if the files changed (or if `force`); keeps the old value when the new files
    /// do not load. The new value replaces the old one whole (a key never pairs with an old
    /// CA).
    fn reload(&self, force: bool) {
        let stamps = self.files.stamps();
        let mut seen = self.stamps.lock().expect("not poisoned");
        if !force && *seen == stamps {
            return;
        }
        match (self.build)(&self.files) {
            Ok(value) => {
                // Remembered only once the files loaded: a half-written file is read again
                // on the next poll, even if the writer finished within the same mtime tick.
                *seen = stamps;
                *self.current.write().expect("not poisoned") = Arc::new(value);
                metrics::counter!("raftlock_tls_reloads_total").increment(1);
                tracing::info!(cert = %self.files.cert.display(), "{} reloaded", self.what);
            }
            Err(e) => {
                metrics::counter!("raftlock_tls_reload_failures_total").increment(1);
                tracing::error!(error = %e, "{} did not load; keeping the previous one", self.what)
            }
        }
    }
}

/// A server configuration that follows its files (see the module docs).
pub struct ServerTls(Followed<rustls::ServerConfig>);

impl ServerTls {
    /// Loads the files now; any problem is an error naming the file.
    pub fn load(files: TlsFiles) -> anyhow::Result<Arc<Self>> {
        let config = Followed::load(files, Self::build, "TLS certificate")?;
        Ok(Arc::new(ServerTls(config)))
    }

    fn build(files: &TlsFiles) -> anyhow::Result<rustls::ServerConfig> {
        let key = certified_key(files)?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = match &files.ca {
            // Mutual TLS: only certificates chaining to the peer CA get in.
            Some(ca) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(load_roots(ca)?, provider())
                        .build()
                        .map_err(|e| anyhow!("{}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config =
            builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)));
        // The listener speaks HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// The configuration new connections use.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.0.get())
    }

    /// Re-reads the files if they changed (or if `force`).
    pub fn reload(&self, force: bool) {
        self.0.reload(force);
    }
}

/// This node's side of mutual TLS when it calls a peer: presents its certificate and trusts
/// only the peer CA; both follow their files.
pub struct PeerClientTls(
    /// This node's certificate and key, and the verifier of the peer CA.
    Followed<PeerIdentity>,
);

type PeerIdentity = (Arc<CertifiedKey>, Arc<WebPkiServerVerifier>);

impl std::fmt::Debug for PeerClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClientTls")
            .field("files", &self.0.files)
            .finish()
    }
}

impl PeerClientTls {
    pub fn load(files: TlsFiles) -> anyhow::Result<Arc<Self>> {
        let identity = Followed::load(files, Self::build, "peer TLS certificate")?;
        Ok(Arc::new(PeerClientTls(identity)))
    }

    fn build(files: &TlsFiles) -> anyhow::Result<PeerIdentity> {
        let ca = files.ca.as_ref().context("mutual TLS needs a CA file")?;
        let verifier = WebPkiServerVerifier::builder_with_provider(load_roots(ca)?, provider())
            .build()
            .map_err(|e| anyhow!("{}: {e}", ca.display()))?;
        Ok((certified_key(files)?, verifier))
    }

    /// The rustls client configuration for peer requests (hand it to reqwest).
    pub fn client_config(self: &Arc<Self>) -> anyhow::Result<rustls::ClientConfig> {
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .dangerous()
            .with_custom_certificate_verifier(self.clone())
            .with_client_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// Re-reads the files if they changed (or if `force`).
    pub fn reload(&self, force: bool) {
        self.0.reload(force);
    }

    fn verifier(&self) -> Arc<WebPkiServerVerifier> {
        self.0.get().1.clone()
    }
}

impl ResolvesClientCert for PeerClientTls {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.get().0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Checks a peer's server certificate against the current peer CA, hostname included.
impl ServerCertVerifier for PeerClientTls {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}

/// Everything that follows certificate files on this node.
#[derive(Clone, Default)]
pub struct Reloadable {
    pub servers: Vec<Arc<ServerTls>>,
    pub peer_client: Option<Arc<PeerClientTls>>,
}

impl Reloadable {
    fn reload(&self, force: bool) {
        for server in &self.servers {
            server.reload(force);
        }
        if let Some(client) = &self.peer_client {
            client.reload(force);
        }
    }
}

/// Re-reads changed certificate files every [`RELOAD_POLL`], and all of them on SIGHUP.
pub fn watch(reloadable: Reloadable) {
    if reloadable.servers.is_empty() && reloadable.peer_client.is_none() {
        return;
    }
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            #[cfg(unix)]
            let forced = match hup.as_mut() {
                Some(hup) => tokio::select! {
                    _ = hup.recv() => true,
                    _ = tokio::time::sleep(RELOAD_POLL) => false,
                },
                None => {
                    tokio::time::sleep(RELOAD_POLL).await;
                    false
                }
            };
            #[cfg(not(unix))]
            let forced = {
                tokio::time::sleep(RELOAD_POLL).await;
                false
            };
            let r = reloadable.clone();
            // File reads and key parsing block: keep them off the runtime's workers.
            let _ = tokio::task::spawn_blocking(move || r.reload(forced)).await;
        }
    });
}
