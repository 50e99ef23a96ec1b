//! `raftlock snapshot save|inspect|restore`: back up the whole cluster to a file, look inside
//! a backup, and prepare the data directories of a new cluster from one
//! (`raftlock_raft::backup`; docs/operations.md, *Backup and restore*).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use raftlock_raft::backup::{self, BackupHeader, RestoreId};
use serde_json::json;

use super::{CmdResult, Conn, Failure};

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: SnapshotCmd,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Save the leader's state at a committed index to FILE (platform token).
    Save { file: PathBuf },
    /// Print a backup's header and what its state holds.
    Inspect { file: PathBuf },
    /// Prepare an empty data directory as one node of a new cluster holding the backup's
    /// state. Run it once per node with the same FILE, --peers and --restore-id (the first
    /// run mints the id and prints it); then start the nodes with those --peers (no --join).
    Restore {
        file: PathBuf,
        /// The new node's data directory (must not exist or be empty).
        #[arg(long)]
        data_dir: PathBuf,
        /// This node's id in the new cluster.
        #[arg(long)]
        node_id: u64,
        /// The new cluster: `1=host:port,2=host:port,…` (peer addresses).
        #[arg(long)]
        peers: String,
        /// This restore's id, printed by the restore of the first node: every node of one
        /// restored cluster must be given the same. Omitted, a new one is minted — a new
        /// cluster, with its own cluster id and fencing tokens.
        #[arg(long)]
        restore_id: Option<String>,
    },
}

pub async fn run(args: SnapshotArgs) -> CmdResult {
    let conn = args.conn;
    match args.cmd {
        SnapshotCmd::Save { file } => save(&conn, &file).await,
        SnapshotCmd::Inspect { file } => inspect(&conn, &file),
        SnapshotCmd::Restore {
            file,
            data_dir,
            node_id,
            peers,
            restore_id,
        } => restore(
            &conn,
            &file,
            &data_dir,
            node_id,
            &peers,
            restore_id.as_deref(),
        ),
    }
}

/// Asks the cluster for a backup (the SDK fails over until the leader answers), checks its
/// header, and writes it durably.
async fn save(conn: &Conn, file: &Path) -> CmdResult {
    let bytes = conn.admin()?.snapshot(Duration::from_secs(60)).await?;
    let header = backup::read_header(&bytes)
        .map_err(|e| Failure::error(format!("the cluster sent a bad backup: {e}")))?;
    write_durably(file, &bytes)?;
    conn.emit(&header_json(&header, bytes.len()), || {
        format!(
            "saved {}: {} bytes, index {}, cluster {}",
            file.display(),
            bytes.len(),
            header.last_applied.map_or(0, |l| l.index),
            header.cluster_id.map(|c| c.to_string()).unwrap_or_default()
        )
    });
    Ok(0)
}

/// Writes the file next to its final name, syncs it and renames it into place.
fn write_durably(file: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let tmp = file.with_extension("partial");
    let fail = |e: std::io::Error| Failure::error(format!("{}: {e}", file.display()));
    let mut f = std::fs::File::create(&tmp).map_err(fail)?;
    f.write_all(bytes).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, file).map_err(fail)?;
    // The rename is durable only once the directory is synced.
    let parent = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(fail)
}

fn read_file(file: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(file).map_err(|e| Failure::error(format!("{}: {e}", file.display())))
}

fn header_json(h: &BackupHeader, bytes: usize) -> serde_json::Value {
    json!({
        "format": h.format,
        "state_format": h.state_format,
        "cluster_id": h.cluster_id,
        "index": h.last_applied.map(|l| l.index),
        "term": h.last_applied.map(|l| l.leader_id.term),
        "taken_at_ms": h.taken_at_ms,
        "bytes": bytes,
    })
}

fn inspect(conn: &Conn, file: &Path) -> CmdResult {
    let bytes = read_file(file)?;
    let (header, state, shards) =
        backup::read_all(&bytes).map_err(|e| Failure::error(format!("{}: {e}", file.display())))?;
    let summary = state.machine.summary();
    let mut doc = header_json(&header, bytes.len());
    doc["counts"] = serde_json::to_value(summary).unwrap_or_default();
    // Each data shard's counts, as for the meta group.
    let mut per_shard = Vec::new();
    for shard in &shards {
        let state = shard.decode().map_err(|e| {
            Failure::error(format!("{}: shard {}: {e}", file.display(), shard.group))
        })?;
        let counts = serde_json::to_value(state.machine.summary()).unwrap_or_default();
        per_shard.push(json!({ "id": shard.group, "counts": counts }));
    }
    doc["shards"] = json!(per_shard);
    conn.emit(&doc, || {
        let shard_lines: String = (per_shard.iter())
            .map(|s| {
                let c = &s["counts"];
                format!(
                    "\n  shard {}: project locks {}, held hierarchical locks {}, semaphores {}",
                    s["id"], c["project_locks"], c["held_locks"], c["semaphores"]
                )
            })
            .collect();
        format!(
            "backup {}\n  format {} (state format {}), {} bytes\n  cluster {}\n  index {}, taken at {} ms\n  projects {}, keys {}, project locks {}, next fencing token {}\n  namespaces {}, leases {}, held hierarchical locks {}, waiters {}\n  semaphores {} ({} holds, next fencing token {}), wait groups {}, barriers {}",
            file.display(),
            header.format,
            header.state_format,
            bytes.len(),
            header.cluster_id.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            header.last_applied.map_or(0, |l| l.index),
            header.taken_at_ms,
            summary.projects,
            summary.keys,
            summary.project_locks,
            summary.next_fencing_token,
            summary.namespaces,
            summary.leases,
            summary.held_locks,
            summary.waiters,
            summary.semaphores,
            summary.semaphore_holds,
            summary.next_semaphore_fencing_token,
            summary.wait_groups,
            summary.barriers,
        ) + &shard_lines
    });
    Ok(0)
}

fn restore(
    conn: &Conn,
    file: &Path,
    dir: &Path,
    node_id: u64,
    peers: &str,
    restore_id: Option<&str>,
) -> CmdResult {
    let peers =
        crate::config::parse_peers(peers).map_err(|e| Failure::error(format!("--peers: {e:#}")))?;
    let restore = match restore_id {
        Some(text) => {
            let given = RestoreId::parse(text).map_err(|e| Failure::error(e.to_string()))?;
            given
                .check_not_ahead(crate::clock::wall_clock() / 1_000_000)
                .map_err(|e| Failure::error(e.to_string()))?;
            given
        }
        None => RestoreId::mint(),
    };
    let bytes = read_file(file)?;
    let (header, state, shards) =
        backup::read_all(&bytes).map_err(|e| Failure::error(format!("{}: {e}", file.display())))?;
    // The shards this node is a member of, each into groups/<id>/ after the meta group.
    let mine: Vec<_> = (shards.iter())
        .filter_map(|shard| {
            let members = &state.machine.shards().get(shard.group)?.members;
            members.contains(&node_id).then(|| (shard, members.clone()))
        })
        .collect();
    let restored = backup::restore_into(dir, &header, state, node_id, &peers, &restore)
        .map_err(|e| Failure::error(e.to_string()))?;
    for (shard, members) in &mine {
        let shard_dir = crate::shards::group_dir(dir, shard.group);
        backup::restore_shard_into(&shard_dir, &header, shard, members, &peers, &restore)
            .map_err(|e| Failure::error(e.to_string()))?;
    }
    let (id, skip) = (restored.cluster_id, restored.fencing_skip);
    let others = if restore_id.is_none() {
        format!(
            "\nrestore every other node of this cluster with --restore-id {restore} (the same \
             FILE and --peers); a restore without it is another cluster"
        )
    } else {
        String::new()
    };
    conn.emit(
        &json!({
            "data_dir": dir,
            "node_id": node_id,
            "cluster_id": id,
            "restore_id": restore.to_string(),
            "restore_id_minted": restore_id.is_none(),
            "restored_at_ms": restore.at_ms(),
            "state_time_ns": restored.state_time,
            "fencing_tokens_skipped": skip,
            "next_fencing_token": restored.next_fencing_token,
            "shards": mine.iter().map(|(shard, _)| shard.group).collect::<Vec<_>>(),
        }),
        || {
            format!(
                "{} is node {node_id} of new cluster {id} (restore {restore}, fencing tokens skipped: {skip}, next token {}); start it with the same --peers{others}",
                dir.display(),
                restored.next_fencing_token,
            )
        },
    );
    Ok(0)
}
