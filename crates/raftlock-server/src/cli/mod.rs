//! The client half of the `raftlock` binary: lock, namespace, lease, hierarchical-lock,
//! semaphore, wait-group, barrier, admin and cluster commands, built on `raftlock-client`.
//!
//! Conventions shared by every command:
//! * Endpoints and credentials come from `--endpoints` / `--key` / `--platform-token` or
//!   `RAFTLOCK_ENDPOINTS` / `RAFTLOCK_KEY` / `RAFTLOCK_PLATFORM_TOKEN`.
//! * Output is human-readable; `--json` prints one JSON document for scripts.
//! * Errors are one line on stderr (`raftlock: …`) and exit status [`EXIT_ERROR`];
//!   contention (lock held, ownership lost, hierarchical lock unavailable) exits with
//!   [`EXIT_NOT_ACQUIRED`]; `lock run` exits with [`EXIT_LOCK_LOST`] when it had to stop the
//!   command because the lock was lost.
//!
//! ## Layout
//! - `mod.rs`: shared flags, the command enum, output and error helpers.
//! - [`lock`]: `raftlock lock …` (project locks), including `lock run`.
//! - [`hier`]: `raftlock ns|lease|hlock …` (hierarchical locks).
//! - [`sem`]: `raftlock sem …` (semaphores and semaphore leases).
//! - [`coord`]: `raftlock wg …` (wait groups) and `raftlock barrier …` (barriers).
//! - [`admin`]: `raftlock admin project|key …` and `raftlock cluster status`.
//! - [`snapshot`]: `raftlock snapshot save|inspect|restore` (backups).

pub mod admin;
pub mod coord;
pub mod hier;
pub mod lock;
pub mod sem;
pub mod snapshot;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use raftlock_client::paging::Page;
use raftlock_client::Client;
use serde::Serialize;

/// Exit status for failures (bad input, unreachable cluster, refused credential…).
pub const EXIT_ERROR: i32 = 1;
/// Exit status when a lock was not acquired or is no longer owned (`EX_TEMPFAIL`).
pub const EXIT_NOT_ACQUIRED: i32 = 75;
/// Exit status of `lock run` when the lock was lost and the command was stopped.
pub const EXIT_LOCK_LOST: i32 = 76;

/// Client commands of the `raftlock` binary.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Project locks: run a command under a lock, acquire, renew, release, read.
    Lock(lock::LockArgs),
    /// Hierarchical-lock namespaces.
    Ns(hier::NsArgs),
    /// Hierarchical-lock leases.
    Lease(hier::LeaseArgs),
    /// Hierarchical locks.
    Hlock(hier::HlockArgs),
    /// Semaphores and semaphore leases.
    Sem(sem::SemArgs),
    /// Wait groups: report jobs, wait for completion.
    Wg(coord::WgArgs),
    /// Barriers: arrive, wait for the trip.
    Barrier(coord::BarrierArgs),
    /// Admin API: projects and keys (platform token).
    Admin(admin::AdminArgs),
    /// Cluster status: members, leader, term, indexes, health (platform token).
    Cluster(admin::ClusterArgs),
    /// Backups: save the cluster's state to a file, inspect one, restore a new cluster.
    Snapshot(snapshot::SnapshotArgs),
}

/// Connection flags, accepted by every client command and its subcommands.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// Node addresses, comma-separated (`host:port` or URLs).
    #[arg(
        long,
        env = "RAFTLOCK_ENDPOINTS",
        global = true,
        value_delimiter = ',',
        default_value = "127.0.0.1:7001"
    )]
    pub endpoints: Vec<String>,
    /// Project key (service-role, or scoped with `locks.manage`).
    #[arg(
        long = "key",
        env = "RAFTLOCK_KEY",
        global = true,
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub project_key: Option<String>,
    /// Platform token, for `admin` and `cluster`.
    #[arg(
        long,
        env = "RAFTLOCK_PLATFORM_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub platform_token: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Timeout of one request, in seconds.
    #[arg(long, global = true, default_value_t = 10, value_name = "SECS")]
    pub request_timeout: u64,
    /// PEM CA certificate to trust for `https://` endpoints (a cluster with its own CA).
    #[arg(long, env = "RAFTLOCK_CACERT", global = true, value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,
}

/// A CLI failure: one line for stderr and an exit status.
#[derive(Debug)]
pub struct Failure {
    /// The line (without the `raftlock:` prefix).
    pub message: String,
    /// Exit status.
    pub code: i32,
}

impl Failure {
    /// An [`EXIT_ERROR`] failure.
    pub fn error(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code: EXIT_ERROR,
        }
    }

    /// An [`EXIT_NOT_ACQUIRED`] failure.
    pub fn contended(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code: EXIT_NOT_ACQUIRED,
        }
    }
}

impl From<raftlock_client::Error> for Failure {
    fn from(e: raftlock_client::Error) -> Failure {
        Failure::error(one_line(&e))
    }
}

/// An error and its sources on one line.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.replace('\n', " ")
}

/// Result of a command: the exit status on success paths.
pub type CmdResult = Result<i32, Failure>;

impl Conn {
    /// A client authenticated with the project key.
    pub fn client(&self) -> Result<Client, Failure> {
        let key = self
            .project_key
            .clone()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| Failure::error("no project key: pass --key or set RAFTLOCK_KEY"))?;
        self.build(key)
    }

    /// A client authenticated with the platform token.
    pub fn admin(&self) -> Result<Client, Failure> {
        let token = self
            .platform_token
            .clone()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                Failure::error(
                    "no platform token: pass --platform-token or set RAFTLOCK_PLATFORM_TOKEN",
                )
            })?;
        self.build(token)
    }

    fn build(&self, token: String) -> Result<Client, Failure> {
        let mut builder = Client::builder()
            .endpoints(self.endpoints.clone())
            .token(token)
            .request_timeout(Duration::from_secs(self.request_timeout.max(1)))
            .failover_budget(Duration::from_secs(5));
        if let Some(path) = &self.cacert {
            let pem = std::fs::read(path)
                .map_err(|e| Failure::error(format!("--cacert {}: {e}", path.display())))?;
            builder = builder.ca_cert_pem(pem);
        }
        Ok(builder.build()?)
    }

    /// Prints `value` as JSON with `--json`, else the human text.
    pub fn emit<T: Serialize>(&self, value: &T, human: impl FnOnce() -> String) {
        if self.json {
            match serde_json::to_string_pretty(value) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("raftlock: cannot encode output: {e}"),
            }
        } else {
            let text = human();
            if !text.is_empty() {
                println!("{}", text.trim_end());
            }
        }
    }

    /// [`Conn::emit`] with the human form made by `render`.
    pub fn show<T: Serialize>(&self, value: &T, render: impl FnOnce(&T) -> String) {
        self.emit(value, || render(value));
    }

    /// Prints one page of a listing: the page as JSON, or a table of one row per item and
    /// the flag that fetches the next page.
    pub fn emit_page<T: Serialize>(
        &self,
        page: &Page<T>,
        headers: &[&str],
        row: impl Fn(&T) -> Vec<String>,
    ) {
        self.emit(page, || {
            let rows: Vec<Vec<String>> = page.items.iter().map(row).collect();
            let next = &page.next_pagination_token;
            let more = if next.is_empty() {
                String::new()
            } else {
                format!("\nnext page: --page-token {next}")
            };
            table(headers, &rows) + &more
        });
    }

    /// Prints that `kind` `name` was deleted.
    pub fn emit_deleted(&self, kind: &str, name: &str) {
        self.emit(&serde_json::json!({ "deleted": name }), || {
            format!("deleted {kind} {name}")
        });
    }
}

/// Runs a client command; returns the process exit status.
pub async fn run(cmd: ClientCommand) -> i32 {
    let result = match cmd {
        ClientCommand::Lock(a) => lock::run(a).await,
        ClientCommand::Ns(a) => hier::ns(a).await,
        ClientCommand::Lease(a) => hier::lease(a).await,
        ClientCommand::Hlock(a) => hier::hlock(a).await,
        ClientCommand::Sem(a) => sem::sem(a).await,
        ClientCommand::Wg(a) => coord::wg(a).await,
        ClientCommand::Barrier(a) => coord::barrier(a).await,
        ClientCommand::Admin(a) => admin::admin(a).await,
        ClientCommand::Cluster(a) => admin::cluster(a).await,
        ClientCommand::Snapshot(a) => snapshot::run(a).await,
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!("raftlock: {}", f.message);
            f.code
        }
    }
}

/// Parses `k=v` metadata flags.
pub fn parse_metadata(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    pairs
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| Failure::error(format!("metadata {p:?} is not KEY=VALUE")))
        })
        .collect()
}

/// Nanoseconds since the epoch as RFC 3339 (`-` for zero).
pub fn nanos(n: i64) -> String {
    if n <= 0 {
        return "-".into();
    }
    let t = UNIX_EPOCH + Duration::from_nanos(n as u64);
    raftlock_client::format_rfc3339(t)
}

/// A time as RFC 3339 plus how far away it is.
pub fn when(t: SystemTime) -> String {
    let text = raftlock_client::format_rfc3339(t);
    match t.duration_since(SystemTime::now()) {
        Ok(d) => format!("{text} (in {}s)", d.as_secs()),
        Err(e) => format!("{text} ({}s ago)", e.duration().as_secs()),
    }
}

/// Formats rows as a left-aligned table with a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(header.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(
            &["ID", "ADDR"],
            &[
                vec!["1".into(), "a:1".into()],
                vec!["10".into(), "b".into()],
            ],
        );
        assert_eq!(t, "ID  ADDR\n1   a:1\n10  b");
    }

    #[test]
    fn metadata_pairs_parse() {
        let m = parse_metadata(&["a=1".into(), "b=x=y".into()]).unwrap();
        assert_eq!(m["b"], "x=y");
        assert!(parse_metadata(&["nope".into()]).is_err());
    }
}
