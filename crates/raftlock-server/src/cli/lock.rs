//! `raftlock lock …`: the project-lock commands, and `lock run`, which runs a command while
//! holding a lock.

use std::process::ExitStatus;
use std::time::Duration;

use clap::{Args, Subcommand};
use raftlock_client::{Acquire, Client, Contention, Hold, LockOptions, LockToken, Release, Renew};
use serde_json::json;
use tokio::process::Command;
use tokio::time::Instant;

use super::{when, CmdResult, Conn, Failure, EXIT_ERROR, EXIT_LOCK_LOST};

/// Environment variable carrying the fencing token to the command of `lock run`.
pub const FENCING_ENV: &str = "RAFTLOCK_FENCING_TOKEN";
/// Environment variable carrying the lock key to the command of `lock run`.
pub const KEY_ENV: &str = "RAFTLOCK_LOCK_KEY";

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: LockCmd,
}

#[derive(Debug, Subcommand)]
pub enum LockCmd {
    /// Run a command while holding the lock; exit with its status.
    ///
    /// The lock is renewed about every TTL/3. The command gets the fencing token in
    /// RAFTLOCK_FENCING_TOKEN (and the key in RAFTLOCK_LOCK_KEY) and runs in its own process
    /// group. If the lock is lost the group gets SIGTERM, then SIGKILL after --grace, and the
    /// exit status is 76. If the lock is not acquired the command does not run and the exit
    /// status is 75. SIGINT, SIGTERM and SIGHUP sent to raftlock are passed on to the command;
    /// the lock is released once it exits.
    Run {
        /// Lock key.
        key: String,
        /// Lease TTL in seconds (5 … 7776000).
        #[arg(long, default_value_t = 30)]
        ttl: u64,
        /// Wait up to this many seconds for the lock instead of giving up at once.
        #[arg(long, value_name = "SECS")]
        wait: Option<u64>,
        /// Seconds between SIGTERM and SIGKILL when the lock is lost.
        #[arg(long, default_value_t = 10, value_name = "SECS")]
        grace: u64,
        /// The command and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Acquire (or re-acquire with --token) a lease; prints the token to renew/release with.
    Acquire {
        /// Lock key.
        key: String,
        /// Lease TTL in seconds.
        #[arg(long, default_value_t = 30)]
        ttl: u64,
        /// Ownership token (UUID); a new one when omitted.
        #[arg(long)]
        token: Option<LockToken>,
    },
    /// Renew a lease.
    Renew {
        /// Lock key.
        key: String,
        /// Ownership token from `acquire`.
        #[arg(long)]
        token: LockToken,
        /// New TTL in seconds.
        #[arg(long, default_value_t = 30)]
        ttl: u64,
    },
    /// Release a lease.
    Release {
        /// Lock key.
        key: String,
        /// Ownership token from `acquire`.
        #[arg(long)]
        token: LockToken,
    },
    /// Show whether the lock is held, its expiry and fencing token.
    Get {
        /// Lock key.
        key: String,
    },
    /// Delete the lease whoever holds it.
    ForceRelease {
        /// Lock key.
        key: String,
    },
}

pub async fn run(args: LockArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.client()?;
    match args.cmd {
        LockCmd::Run {
            key,
            ttl,
            wait,
            grace,
            command,
        } => {
            let opts = LockOptions {
                ttl: Duration::from_secs(ttl),
                wait: wait.map(Duration::from_secs),
                token: None,
            };
            run_locked(&client, &key, opts, Duration::from_secs(grace), command).await
        }
        LockCmd::Acquire { key, ttl, token } => {
            let token = token.unwrap_or_default();
            match client
                .acquire(&key, token, Duration::from_secs(ttl))
                .await?
            {
                Acquire::Acquired(lease) => {
                    let out = json!({
                        "result": "acquired",
                        "key": key,
                        "token": token,
                        "fencing_token": lease.fencing_token,
                        "expires_at": raftlock_client::format_rfc3339(lease.expires_at),
                    });
                    conn.emit(&out, || {
                        format!(
                            "acquired {key}\n  token:         {token}\n  fencing token: {}\n  expires at:    {}",
                            lease.fencing_token,
                            when(lease.expires_at)
                        )
                    });
                    Ok(0)
                }
                other => Err(contended(&key, other_contention(other))),
            }
        }
        LockCmd::Renew { key, token, ttl } => {
            match client.renew(&key, token, Duration::from_secs(ttl)).await? {
                Renew::Renewed(lease) => {
                    conn.emit(&Renew::Renewed(lease), || {
                        format!(
                            "renewed {key}: fencing token {}, expires at {}",
                            lease.fencing_token,
                            when(lease.expires_at)
                        )
                    });
                    Ok(0)
                }
                Renew::OwnershipLost => Err(contended(&key, Contention::OwnershipLost)),
            }
        }
        LockCmd::Release { key, token } => match client.release(&key, token).await? {
            Release::Released => {
                conn.emit(&Release::Released, || format!("released {key}"));
                Ok(0)
            }
            Release::OwnershipLost => Err(contended(&key, Contention::OwnershipLost)),
        },
        LockCmd::Get { key } => {
            let s = client.get(&key).await?;
            conn.emit(&s, || match (s.held, s.fencing_token, s.expires_at) {
                (true, Some(f), Some(e)) => {
                    format!(
                        "{key}: held\n  fencing token: {f}\n  expires at:    {}",
                        when(e)
                    )
                }
                (true, _, _) => format!("{key}: held"),
                _ => format!("{key}: free"),
            });
            Ok(0)
        }
        LockCmd::ForceRelease { key } => {
            client.force_release(&key).await?;
            conn.emit(&json!({ "result": "released", "key": key }), || {
                format!("force-released {key}")
            });
            Ok(0)
        }
    }
}

fn other_contention(a: Acquire) -> Contention {
    match a {
        Acquire::OwnershipLost => Contention::OwnershipLost,
        _ => Contention::Held,
    }
}

fn contended(key: &str, c: Contention) -> Failure {
    Failure::contended(match c {
        Contention::Held => format!("lock {key} is held by another owner (lock_held)"),
        Contention::OwnershipLost => {
            format!("lock {key} is no longer owned by this token (lock_ownership_lost)")
        }
    })
}

/// The exit status a shell would report for `status`.
fn exit_code(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    use std::os::unix::process::ExitStatusExt;
    status.signal().map(|sig| 128 + sig).unwrap_or(EXIT_ERROR)
}

/// Signals the command's whole process group (it leads its own group), so helpers it started
/// stop with it.
fn signal(pid: Option<u32>, sig: libc::c_int) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) on the process group of a child we spawned with process_group(0).
        unsafe {
            libc::kill(-(pid as libc::pid_t), sig);
        }
    }
}

/// `lock run`: acquire, spawn, watch, stop on loss, release, exit with the command's status.
async fn run_locked(
    client: &Client,
    key: &str,
    opts: LockOptions,
    grace: Duration,
    command: Vec<String>,
) -> CmdResult {
    let held = match client.hold(key, opts).await? {
        Hold::Acquired(h) => h,
        Hold::NotAcquired(c) => return Err(contended(key, c)),
    };
    let guard = held.guard().clone();
    let spawned = Command::new(&command[0])
        .args(&command[1..])
        .env(FENCING_ENV, guard.fencing_token().to_string())
        .env(KEY_ENV, key)
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = held.release().await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(Failure {
                message: format!("cannot run {:?}: {e}", command[0]),
                code,
            });
        }
    };
    let pid = child.id();

    let (mut sigterm, mut sighup, mut sigint) = {
        use tokio::signal::unix::{signal as on, SignalKind};
        let on = |k| on(k).map_err(|e| Failure::error(format!("signal handler: {e}")));
        (
            on(SignalKind::terminate())?,
            on(SignalKind::hangup())?,
            on(SignalKind::interrupt())?,
        )
    };

    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        tokio::select! {
            st = child.wait() => break st,
            _ = guard.cancelled(), if !lost => {
                lost = true;
                let why = guard
                    .loss_reason()
                    .map(|r| format!("{r:?}"))
                    .unwrap_or_default();
                eprintln!("raftlock: lock {key} lost ({why}); stopping the command");
                signal(pid, libc::SIGTERM);
                kill_at = Some(Instant::now() + grace);
            }
            _ = async { tokio::time::sleep_until(kill_at.expect("guarded")).await }, if kill_at.is_some() => {
                kill_at = None;
                signal(pid, libc::SIGKILL);
                let _ = child.start_kill();
            }
            // Signals for us are passed on; we keep waiting so the lock is released after
            // the command exits.
            _ = sigterm.recv() => signal(pid, libc::SIGTERM),
            _ = sighup.recv() => signal(pid, libc::SIGHUP),
            _ = sigint.recv() => signal(pid, libc::SIGINT),
        }
    };
    match held.release().await {
        Ok(_) => {}
        Err(e) => eprintln!(
            "raftlock: releasing {key} failed (the lease will expire): {}",
            super::one_line(&e)
        ),
    }
    let status = status.map_err(|e| Failure::error(format!("waiting for the command: {e}")))?;
    if lost {
        return Ok(EXIT_LOCK_LOST);
    }
    Ok(exit_code(status))
}
