//! `raftlock sem …`: semaphores and semaphore leases.

use clap::{Args, Subcommand};
use raftlock_client::leases::SEMAPHORE_LEASES;
use raftlock_client::semaphores::{Semaphore, SemaphoreHolder};
use raftlock_client::{AcquireSemaphoreRequest, UpdateSemaphoreRequest};
use serde_json::json;

use super::hier::{run_lease, LeaseCmd, Named, Paging};
use super::{nanos, parse_metadata, CmdResult, Conn, Failure};

#[derive(Debug, Args)]
pub struct SemArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: SemCmd,
}

#[derive(Debug, Subcommand)]
pub enum SemCmd {
    /// Create a semaphore.
    Create {
        #[command(flatten)]
        at: Named,
        /// Capacity: the most weight held at once.
        #[arg(long)]
        permits: u64,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
        /// Metadata entry KEY=VALUE (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
    },
    /// Show a semaphore.
    Get(Named),
    /// Update a semaphore: omitted fields keep their value; guarded by its version.
    Update {
        #[command(flatten)]
        at: Named,
        /// New capacity (not below what is held).
        #[arg(long)]
        permits: Option<u64>,
        /// New description.
        #[arg(long)]
        description: Option<String>,
        /// New metadata entry KEY=VALUE (repeatable; replaces all metadata).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Only update if the semaphore is at this version (default: the version just read).
        #[arg(long)]
        expected_version: Option<u64>,
    },
    /// Delete a semaphore, dropping its holders and waiters.
    Delete(Named),
    /// List a namespace's semaphores.
    List {
        /// Namespace.
        namespace: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// List a semaphore's holders, in arrival order.
    Holders {
        #[command(flatten)]
        at: Named,
        #[command(flatten)]
        paging: Paging,
    },
    /// Acquire permits under a semaphore lease (exit 75 when not acquired).
    Acquire {
        #[command(flatten)]
        at: Named,
        /// The semaphore lease.
        #[arg(long)]
        lease: String,
        /// Permits to hold.
        #[arg(long, default_value_t = 1)]
        weight: u64,
        /// Seconds to wait in the queue (0–300).
        #[arg(long, default_value_t = 0)]
        timeout: u64,
        /// Holder metadata KEY=VALUE (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
    },
    /// Release a lease's permits.
    Release {
        #[command(flatten)]
        at: Named,
        /// The semaphore lease.
        #[arg(long)]
        lease: String,
    },
    /// Semaphore leases: create, refresh, revoke, get, list.
    Lease {
        #[command(subcommand)]
        cmd: LeaseCmd,
    },
}

fn semaphore_row(s: &Semaphore) -> Vec<String> {
    let held = format!("{}/{}", s.active_holds, s.permits);
    vec![s.name.clone(), held, s.active_holders_count.to_string()]
}

fn show_semaphore(s: &Semaphore) -> String {
    let mut out = format!(
        "semaphore {}: {} of {} permits held by {}\n  description:   {}\n  version:       {}\n  created at:    {}\n  updated at:    {}\n  last activity: {}",
        s.name,
        s.active_holds,
        s.permits,
        s.active_holders_count,
        s.description,
        s.version,
        nanos(s.created_at),
        nanos(s.updated_at),
        nanos(s.last_activity_at)
    );
    for (k, v) in &s.metadata {
        out.push_str(&format!("\n  {k} = {v}"));
    }
    out
}

fn holder_row(h: &SemaphoreHolder) -> Vec<String> {
    vec![
        h.lease_id.clone(),
        h.weight.to_string(),
        h.fencing_token.to_string(),
        nanos(h.locked_at),
    ]
}

pub async fn sem(args: SemArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.client()?;
    match args.cmd {
        SemCmd::Create {
            at: Named { namespace, name },
            permits,
            description,
            metadata,
        } => {
            let meta = parse_metadata(&metadata)?;
            let s = client
                .create_semaphore(&namespace, &name, &description, permits, meta)
                .await?;
            conn.show(&s, show_semaphore);
        }
        SemCmd::Get(Named { namespace, name }) => conn.show(
            &client.get_semaphore(&namespace, &name).await?,
            show_semaphore,
        ),
        SemCmd::Update {
            at: Named { namespace, name },
            permits,
            description,
            metadata,
            expected_version,
        } => {
            let current = client.get_semaphore(&namespace, &name).await?;
            let metadata = if metadata.is_empty() {
                current.metadata
            } else {
                parse_metadata(&metadata)?
            };
            let req = UpdateSemaphoreRequest {
                namespace_name: namespace,
                semaphore_name: name,
                description: description.unwrap_or(current.description),
                permits: permits.unwrap_or(current.permits),
                metadata,
                expected_version: Some(expected_version.unwrap_or(current.version)),
            };
            let s = client.update_semaphore(&req).await?;
            conn.show(&s, show_semaphore);
        }
        SemCmd::Delete(Named { namespace, name }) => {
            client.delete_semaphore(&namespace, &name).await?;
            conn.emit_deleted("semaphore", &name);
        }
        SemCmd::List { namespace, paging } => {
            let page = client
                .list_semaphores(&namespace, &paging.request())
                .await?;
            conn.emit_page(&page, &["NAME", "HELD", "HOLDERS"], semaphore_row);
        }
        SemCmd::Holders {
            at: Named { namespace, name },
            paging,
        } => {
            let page = client
                .list_semaphore_holders(&namespace, &name, &paging.request())
                .await?;
            conn.emit_page(&page, &["LEASE", "WEIGHT", "FENCING", "SINCE"], holder_row);
        }
        SemCmd::Acquire {
            at: Named { namespace, name },
            lease,
            weight,
            timeout,
            metadata,
        } => {
            let req = AcquireSemaphoreRequest {
                namespace_name: namespace,
                semaphore_name: name.clone(),
                lease_id: lease,
                weight,
                timeout_seconds: timeout,
                metadata: parse_metadata(&metadata)?,
            };
            let answer = client.acquire_semaphore(&req).await?;
            conn.emit(&answer, || {
                let s = show_semaphore(&answer.semaphore);
                if answer.acquired() {
                    format!(
                        "acquired {weight}, fencing token {}\n{s}",
                        answer.fencing_token
                    )
                } else {
                    let outcome = json!(answer.outcome);
                    format!("not acquired: {}\n{s}", outcome.as_str().unwrap_or(""))
                }
            });
            if !answer.acquired() {
                return Err(Failure::contended(format!(
                    "semaphore {name}: {weight} permits not acquired"
                )));
            }
        }
        SemCmd::Release {
            at: Named { namespace, name },
            lease,
        } => {
            let s = client.release_semaphore(&namespace, &name, &lease).await?;
            conn.show(&s, show_semaphore);
        }
        SemCmd::Lease { cmd } => return run_lease(&conn, SEMAPHORE_LEASES, cmd).await,
    }
    Ok(0)
}
