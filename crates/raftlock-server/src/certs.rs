//! `raftlock certs`: a private CA and per-node certificates (rcgen), for `raftlock dev --tls`,
//! the deploy scripts and tests.
//!
//! Files written to `--out`: `ca.pem` and `ca-key.pem` (made once; reused when present, so
//! adding a node or renewing its certificate keeps the CA), and for each `--node NAME=SANS`
//! `NAME.pem` and `NAME-key.pem`. A node certificate is valid for both server and client
//! authentication, so one file serves a node's client listener, its peer listener and its
//! calls to peers. SANs are DNS names or IP addresses; hostnames are verified against them.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

#[derive(Debug, Clone, Args)]
pub struct CertsArgs {
    /// Directory for the PEM files (created when missing).
    #[arg(long)]
    pub out: PathBuf,
    /// A node certificate to make: `NAME=SAN[,SAN…]`, e.g.
    /// `node1=raftlock-1,raftlock-1.raftlock,10.0.0.5`. Repeat for each node.
    #[arg(long = "node", value_name = "NAME=SANS")]
    pub nodes: Vec<String>,
    /// Days the node certificates are valid (the CA gets ten times as long).
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

/// Runs `raftlock certs`.
pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    let ca = Ca::open_or_create(&args.out, args.days.saturating_mul(10))?;
    for spec in &args.nodes {
        let (name, sans) = spec
            .split_once('=')
            .with_context(|| format!("--node {spec:?}: want NAME=SAN[,SAN…]"))?;
        let sans: Vec<String> = sans.split(',').map(|s| s.trim().to_string()).collect();
        let paths = ca.issue(&args.out, name, &sans, args.days)?;
        println!("{}  {}", paths.0.display(), paths.1.display());
    }
    println!("{}", args.out.join("ca.pem").display());
    Ok(())
}

/// A CA whose key is at hand.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A little in the past, so a node whose clock is slightly behind accepts it.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days.into());
}

fn write(path: &Path, text: &str, private: bool) -> anyhow::Result<()> {
    // Write then rename: a node watching the file never reads half of it.
    let tmp = path.with_extension("pem.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = private;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

impl Ca {
    /// Reads `ca.pem`/`ca-key.pem` from `dir`, or makes a new CA there.
    pub fn open_or_create(dir: &Path, days: u32) -> anyhow::Result<Ca> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
        if cert_path.exists() && key_path.exists() {
            let key_pem = std::fs::read_to_string(&key_path)
                .with_context(|| format!("reading {}", key_path.display()))?;
            let key = KeyPair::from_pem(&key_pem)
                .with_context(|| format!("{}: not a private key", key_path.display()))?;
            let cert_pem = std::fs::read_to_string(&cert_path)
                .with_context(|| format!("reading {}", cert_path.display()))?;
            let params = CertificateParams::from_ca_cert_pem(&cert_pem)
                .with_context(|| format!("{}: not a CA certificate", cert_path.display()))?;
            // Re-signing the same parameters with the same key gives an equivalent issuer.
            let cert = params.self_signed(&key)?;
            return Ok(Ca { cert, key });
        }
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "raftlock cluster CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity(&mut params, days);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        write(&cert_path, &cert.pem(), false)?;
        write(&key_path, &key.serialize_pem(), true)?;
        Ok(Ca { cert, key })
    }

    /// Writes `NAME.pem` and `NAME-key.pem` for a node known by `sans`.
    pub fn issue(
        &self,
        dir: &Path,
        name: &str,
        sans: &[String],
        days: u32,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            bail!("node name {name:?}: use letters, digits, '-', '_' or '.'");
        }
        if sans.iter().any(String::is_empty) {
            bail!("node {name}: empty subject alternative name");
        }
        let mut params = CertificateParams::new(sans.to_vec())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        validity(&mut params, days);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
        );
        // Key first: a watcher that sees the new certificate finds its key already there.
        write(&key_path, &key.serialize_pem(), true)?;
        write(&cert_path, &cert.pem(), false)?;
        Ok((cert_path, key_path))
    }
}
