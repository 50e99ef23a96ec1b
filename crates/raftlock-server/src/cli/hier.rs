//! `raftlock ns|lease|hlock …`: the hierarchical-lock methods.

use std::time::Duration;

use clap::{Args, Subcommand};
use raftlock_client::hierarchy::{Lock, LockLease, Namespace};
use raftlock_client::leases::{LeaseMethods, LOCK_LEASES};
use raftlock_client::{AcquireLockRequest, PageRequest, UpdateNamespaceRequest};
use serde_json::json;

use super::{nanos, parse_metadata, CmdResult, Conn, Failure};

/// Paging flags of list commands.
#[derive(Debug, Clone, Args)]
pub struct Paging {
    /// Items per page (1–250).
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// Page token from a previous listing.
    #[arg(long, default_value = "")]
    pub page_token: String,
}

/// The object a command addresses: a namespace and a name in it.
#[derive(Debug, Clone, Args)]
pub struct Named {
    /// Namespace.
    pub namespace: String,
    /// Name of the semaphore, wait group or barrier.
    pub name: String,
}

/// The lease a command addresses.
#[derive(Debug, Clone, Args)]
pub struct LeaseAt {
    /// Namespace.
    pub namespace: String,
    /// Lease id.
    pub lease_id: String,
}

impl Paging {
    pub(super) fn request(&self) -> PageRequest {
        PageRequest {
            limit: self.limit,
            pagination_token: self.page_token.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct NsArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: NsCmd,
}

#[derive(Debug, Subcommand)]
pub enum NsCmd {
    /// Create a namespace.
    Create {
        /// Namespace name.
        name: String,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
        /// Metadata entry KEY=VALUE (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
    },
    /// Show a namespace.
    Get {
        /// Namespace name.
        name: String,
    },
    /// Update a namespace: omitted fields keep their value; guarded by its version.
    Update {
        /// Namespace name.
        name: String,
        /// New description.
        #[arg(long)]
        description: Option<String>,
        /// New metadata entry KEY=VALUE (repeatable; replaces all metadata).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Remove all metadata.
        #[arg(long, conflicts_with = "metadata")]
        clear_metadata: bool,
        /// Only update if the namespace is at this version (default: the version just read).
        #[arg(long)]
        expected_version: Option<u64>,
    },
    /// Delete a namespace and everything in it.
    Delete {
        /// Namespace name.
        name: String,
    },
    /// List namespaces.
    List {
        #[command(flatten)]
        paging: Paging,
    },
}

#[derive(Debug, Args)]
pub struct LeaseArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: LeaseCmd,
}

/// The lease commands, alike for the leases of hierarchical locks (`raftlock lease …`) and
/// of semaphores (`raftlock sem lease …`).
#[derive(Debug, Subcommand)]
pub enum LeaseCmd {
    /// Create a lease.
    Create {
        /// Namespace.
        namespace: String,
        /// Process id recorded on the lease.
        #[arg(long)]
        process_id: String,
        /// TTL in seconds (1–300).
        #[arg(long, default_value_t = 60)]
        ttl: u64,
    },
    /// Refresh a lease (and everything it holds).
    Refresh {
        /// Namespace.
        namespace: String,
        /// Lease id.
        lease_id: String,
        /// TTL in seconds (1–300).
        #[arg(long, default_value_t = 60)]
        ttl: u64,
    },
    /// Revoke a lease, releasing everything it holds.
    Revoke(LeaseAt),
    /// Show a lease.
    Get(LeaseAt),
    /// List live leases.
    List {
        /// Namespace.
        namespace: String,
        /// Only leases of this process id.
        #[arg(long)]
        process_id: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
}

#[derive(Debug, Args)]
pub struct HlockArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: HlockCmd,
}

#[derive(Debug, Subcommand)]
pub enum HlockCmd {
    /// Acquire a lock under a lease (exclusive unless --shared).
    Acquire {
        /// Namespace.
        namespace: String,
        /// Lock path, e.g. `db/users`.
        lock: String,
        /// Holding lease id.
        #[arg(long)]
        lease: String,
        /// Shared instead of exclusive.
        #[arg(long)]
        shared: bool,
        /// Seconds to wait on the server (0–300).
        #[arg(long, default_value_t = 0)]
        timeout: u64,
        /// Holder metadata KEY=VALUE (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
    },
    /// Release a lock held by a lease.
    Release {
        /// Namespace.
        namespace: String,
        /// Lock path.
        lock: String,
        /// Holding lease id.
        #[arg(long)]
        lease: String,
    },
    /// Show a lock and its holders.
    Get {
        /// Namespace.
        namespace: String,
        /// Lock path.
        lock: String,
    },
    /// Drop every holder of a lock.
    Delete {
        /// Namespace.
        namespace: String,
        /// Lock path.
        lock: String,
    },
    /// List held locks.
    List {
        /// Namespace.
        namespace: String,
        #[command(flatten)]
        paging: Paging,
    },
}

fn show_namespace(ns: &Namespace) -> String {
    let mut s = format!(
        "namespace {}\n  description: {}\n  version:     {}\n  created at:  {}\n  updated at:  {}",
        ns.name,
        ns.description,
        ns.version,
        nanos(ns.created_at),
        nanos(ns.updated_at)
    );
    for (k, v) in &ns.metadata {
        s.push_str(&format!("\n  {k} = {v}"));
    }
    s
}

pub(super) fn show_lease(l: &LockLease) -> String {
    format!(
        "lease {}\n  process id: {}\n  created at: {}\n  expires at: {}",
        l.lease_id,
        l.process_id,
        nanos(l.created_at),
        nanos(l.expires_at)
    )
}

fn state_name(l: &Lock) -> String {
    let raw = serde_json::to_value(l.state).unwrap_or_default();
    raw.as_str()
        .unwrap_or("")
        .trim_start_matches("LOCK_STATE_")
        .to_lowercase()
}

fn show_lock(l: &Lock) -> String {
    let mut s = format!(
        "lock {}: {}\n  locked at:     {}\n  last activity: {}",
        l.name,
        state_name(l),
        nanos(l.locked_at),
        nanos(l.last_activity_at)
    );
    for h in &l.lock_holders {
        s.push_str(&format!(
            "\n  holder {} since {}",
            h.lease_id,
            nanos(h.locked_at)
        ));
        for (k, v) in &h.metadata {
            s.push_str(&format!(" {k}={v}"));
        }
    }
    s
}

pub async fn ns(args: NsArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.client()?;
    match args.cmd {
        NsCmd::Create {
            name,
            description,
            metadata,
        } => {
            let ns = client
                .create_namespace(&name, &description, parse_metadata(&metadata)?)
                .await?;
            conn.show(&ns, show_namespace);
        }
        NsCmd::Get { name } => {
            let ns = client.get_namespace(&name).await?;
            conn.show(&ns, show_namespace);
        }
        NsCmd::Update {
            name,
            description,
            metadata,
            clear_metadata,
            expected_version,
        } => {
            let current = client.get_namespace(&name).await?;
            let metadata = if clear_metadata {
                Default::default()
            } else if metadata.is_empty() {
                current.metadata
            } else {
                parse_metadata(&metadata)?
            };
            let req = UpdateNamespaceRequest {
                namespace_name: name,
                description: description.unwrap_or(current.description),
                metadata,
                expected_version: Some(expected_version.unwrap_or(current.version)),
            };
            let ns = client.update_namespace(&req).await?;
            conn.show(&ns, show_namespace);
        }
        NsCmd::Delete { name } => {
            client.delete_namespace(&name).await?;
            conn.emit_deleted("namespace", &name);
        }
        NsCmd::List { paging } => {
            let page = client.list_namespaces(&paging.request()).await?;
            conn.emit_page(&page, &["NAME", "VERSION", "CREATED", "DESCRIPTION"], |n| {
                vec![
                    n.name.clone(),
                    n.version.to_string(),
                    nanos(n.created_at),
                    n.description.clone(),
                ]
            });
        }
    }
    Ok(0)
}

pub async fn lease(args: LeaseArgs) -> CmdResult {
    run_lease(&args.conn, LOCK_LEASES, args.cmd).await
}

/// Runs a lease command against one kind of lease.
pub(super) async fn run_lease(conn: &Conn, kind: LeaseMethods, cmd: LeaseCmd) -> CmdResult {
    let client = conn.client()?;
    match cmd {
        LeaseCmd::Create {
            namespace,
            process_id,
            ttl,
        } => {
            let l = client
                .lease_create(kind, &namespace, &process_id, Duration::from_secs(ttl))
                .await?;
            conn.show(&l, show_lease);
        }
        LeaseCmd::Refresh {
            namespace,
            lease_id,
            ttl,
        } => {
            let l = client
                .lease_refresh(kind, &namespace, &lease_id, Duration::from_secs(ttl))
                .await?;
            conn.show(&l, show_lease);
        }
        LeaseCmd::Revoke(LeaseAt {
            namespace,
            lease_id,
        }) => {
            client.lease_revoke(kind, &namespace, &lease_id).await?;
            conn.emit(&json!({ "revoked": lease_id }), || {
                format!("revoked lease {lease_id}")
            });
        }
        LeaseCmd::Get(LeaseAt {
            namespace,
            lease_id,
        }) => {
            let l = client.lease_get(kind, &namespace, &lease_id).await?;
            conn.show(&l, show_lease);
        }
        LeaseCmd::List {
            namespace,
            process_id,
            paging,
        } => {
            let page = client
                .lease_list(kind, &namespace, process_id.as_deref(), &paging.request())
                .await?;
            conn.emit_page(&page, &["LEASE", "PROCESS", "EXPIRES"], |l| {
                vec![
                    l.lease_id.clone(),
                    l.process_id.clone(),
                    nanos(l.expires_at),
                ]
            });
        }
    }
    Ok(0)
}

pub async fn hlock(args: HlockArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.client()?;
    match args.cmd {
        HlockCmd::Acquire {
            namespace,
            lock,
            lease,
            shared,
            timeout,
            metadata,
        } => {
            let req = AcquireLockRequest {
                namespace_name: namespace,
                lock_name: lock.clone(),
                exclusive: !shared,
                lease_id: lease,
                timeout_seconds: timeout,
                metadata: parse_metadata(&metadata)?,
            };
            let answer = client.acquire_lock(&req).await?;
            conn.emit(&answer, || {
                let mut s = show_lock(&answer.lock);
                if !answer.acquired() {
                    let name = |v: serde_json::Value| v.as_str().unwrap_or("").to_string();
                    s = format!(
                        "not acquired: {} ({})\n{s}",
                        name(json!(answer.outcome)),
                        name(json!(answer.reason))
                    );
                    for b in &answer.blocking_locks {
                        s.push_str(&format!("\nblocked by {}", show_lock(b)));
                    }
                }
                s
            });
            if !answer.acquired() {
                return Err(Failure {
                    message: format!("lock {lock} not acquired"),
                    code: super::EXIT_NOT_ACQUIRED,
                });
            }
        }
        HlockCmd::Release {
            namespace,
            lock,
            lease,
        } => {
            let l = client.release_lock(&namespace, &lock, &lease).await?;
            conn.show(&l, show_lock);
        }
        HlockCmd::Get { namespace, lock } => {
            let l = client.get_lock(&namespace, &lock).await?;
            conn.show(&l, show_lock);
        }
        HlockCmd::Delete { namespace, lock } => {
            client.delete_lock(&namespace, &lock).await?;
            conn.emit_deleted("lock", &lock);
        }
        HlockCmd::List { namespace, paging } => {
            let page = client.list_locks(&namespace, &paging.request()).await?;
            conn.emit_page(&page, &["LOCK", "STATE", "HOLDERS", "LAST ACTIVITY"], |l| {
                vec![
                    l.name.clone(),
                    state_name(l),
                    l.lock_holders.len().to_string(),
                    nanos(l.last_activity_at),
                ]
            });
        }
    }
    Ok(0)
}
