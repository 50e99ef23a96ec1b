//! Backups: the replicated state at one applied (hence committed) index in one file, and the
//! data directories of a new cluster prepared from it.
//!
//! File layout: `RLBACKUP` (8 bytes), then checksummed frames ([`codec::frame`]): the
//! [`BackupHeader`], the meta group's state exactly as a snapshot holds it
//! ([`STATE_FORMAT`]-prefixed [`SmData`]), and — format 2 — one [`GroupBackup`] frame per data
//! shard, each the shard's state at an index its leader had applied when asked (each group is
//! consistent on its own; no operation spans two groups, so no cut across them is needed). A
//! flipped bit anywhere fails the frame checksum; a file of another format is refused by
//! number; format 1 (before shards) is read as a backup with no data shard.
//!
//! Restore writes, into an empty data directory, a snapshot file of the backed-up state with
//! the new cluster's membership, and the new cluster's id. Nothing else: on start the node
//! finds a snapshot and no log, and openraft purges the log up to the snapshot (its usual
//! "snapshot installed, log not yet cleaned" path). The snapshot's log id has term 0, so the
//! first election (term 1) appends above it.
//!
//! Every restore of a cluster is one [`RestoreId`]: a UUID (version 7) minted by the first
//! node's restore and given to every other node's, carrying the moment of the restore. From
//! it, the backup and `--peers` alone each node's restore derives byte-identical state, so the
//! nodes agree:
//! - the cluster id ([`restored_cluster_id`]): two restores of one backup — a retried drill, a
//!   second site — are two clusters, and a node of one is refused by the other;
//! - the fencing tokens ([`fencing_skip`]): they jump forward by [`RESTORE_FENCING_SKIP`] (past
//!   any token the old cluster may have handed out after the backup) plus an offset below
//!   [`RESTORE_TOKEN_SPREAD`] drawn from the new cluster id ([`token_offset`]), so two
//!   restores of one backup start their tokens at independent, uniformly spread points: they
//!   hand out a common token with probability at most `(N_A + N_B) / 2^47` when each hands out
//!   at most `N_A`, `N_B` tokens (docs/operations.md, *Backup and restore*);
//! - the state's time: moved forward to the restore's moment (expired leases are reaped as a
//!   tick at that time would), never back. (What makes the restored cluster's time real time
//!   when its nodes start later is the server's clock: the snapshot a node starts from is a
//!   replayed observation, not a live one — `raftlock-server`'s `clock.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft::{BasicNode, CommittedLeaderId, Membership};
use raftlock_core::{codec, Nanos};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::checked_file;
use crate::fs::{Dir, OsDir};
use crate::identity::ClusterIdentity;
use crate::state_machine::{
    decode_state, encode_state, SmData, StoredSnapshot, SNAPSHOT_FILE, SNAPSHOT_MAGIC, STATE_FORMAT,
};
use crate::typ::{GroupId, LogId, NodeId, SnapshotMeta, StoredMembership};

/// First bytes of a backup file.
pub const BACKUP_MAGIC: &[u8; 8] = b"RLBACKUP";
/// Layout version of the backup file (not of the state inside, which has its own).
pub const BACKUP_FORMAT: u32 = 2;
/// The layout of the release before shards: the meta group's state only.
pub const BACKUP_FORMAT_V1: u32 = 1;
/// Fastest rate at which any cluster could hand out fencing tokens, with a wide margin
/// (measured clusters commit ~10^4 writes per second).
pub const MAX_TOKENS_PER_SECOND: u64 = 1_000_000;
/// How far a restore moves the next fencing token: 2^45 ≈ 3.5 × 10^13, everything the old
/// cluster could have issued in [`MAX_BACKUP_AGE_SECONDS`] at [`MAX_TOKENS_PER_SECOND`]. A
/// constant (not a function of the restore's clock) so that nodes restored at different
/// moments hold the same state; tokens live in (2^52, 2^53), room for 128 restores.
pub const RESTORE_FENCING_SKIP: u64 = 1 << 45;
/// Oldest backup a restore accepts: older, the old cluster could (at the assumed rate) have
/// issued more tokens since than [`RESTORE_FENCING_SKIP`] skips.
pub const MAX_BACKUP_AGE_SECONDS: u64 = RESTORE_FENCING_SKIP / MAX_TOKENS_PER_SECOND;
/// Width of the range a restore's extra token offset ([`token_offset`]) is drawn from,
/// uniformly: two restores of one backup share a token only if their offsets fall within the
/// number of tokens they hand out of each other. A restore moves tokens forward by at most
/// [`RESTORE_FENCING_SKIP`] + 2^47 = 5 × 2^45, so the 2^52 tokens of (2^52, 2^53) hold 25
/// generations of restores of restores (a restore that would leave the range is refused).
pub const RESTORE_TOKEN_SPREAD: u64 = 1 << 47;
/// How far in this machine's future a given restore id's moment may be: further, the clocks
/// of the machines restoring one cluster disagree, and the restored time (the id's moment,
/// a floor for the cluster's time) would run ahead of real time — leases would end before
/// their holders were told.
pub const MAX_RESTORE_ID_AHEAD_MS: i64 = 2_000;

/// One restore of a cluster: minted once, by the first node's restore, and given to every
/// other node's so they derive the same state. A UUID of version 7, whose timestamp is the
/// moment of the restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreId(Uuid);

impl RestoreId {
    /// A new restore, at this moment.
    pub fn mint() -> Self {
        RestoreId(Uuid::now_v7())
    }

    /// Reads an id printed by a restore; anything but a version-7 UUID is refused.
    pub fn parse(text: &str) -> Result<Self, BackupError> {
        let id = Uuid::try_parse(text.trim()).map_err(|e| {
            BackupError::Restore(format!("--restore-id {text:?} is not a UUID: {e}"))
        })?;
        if id.get_version_num() != 7 {
            return Err(BackupError::Restore(format!(
                "--restore-id {text} was not minted by a restore (not a version-7 UUID)"
            )));
        }
        Ok(RestoreId(id))
    }

    /// The moment of the restore (Unix ms).
    pub fn at_ms(&self) -> i64 {
        self.0.get_timestamp().map_or(0, |ts| {
            let (secs, nanos) = ts.to_unix();
            secs as i64 * 1000 + i64::from(nanos / 1_000_000)
        })
    }

    /// Refuses an id whose moment is more than [`MAX_RESTORE_ID_AHEAD_MS`] after `now_ms`
    /// (this machine's wall clock): minted on a machine whose clock runs ahead.
    pub fn check_not_ahead(&self, now_ms: i64) -> Result<(), BackupError> {
        let ahead = self.at_ms() - now_ms;
        if ahead > MAX_RESTORE_ID_AHEAD_MS {
            return Err(BackupError::Restore(format!(
                "--restore-id {self} was minted {} ms in this machine's future: the clocks of \
                 the machines restoring this cluster disagree (the restored cluster's time \
                 would run ahead of real time); fix the clocks and restore every node again",
                ahead
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for RestoreId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What a backup file says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// [`BACKUP_FORMAT`] of the writer.
    pub format: u32,
    /// [`STATE_FORMAT`] of the state frame.
    pub state_format: u32,
    /// The cluster the backup was taken from.
    pub cluster_id: Option<Uuid>,
    /// The last log entry applied to the state (every applied entry is committed).
    pub last_applied: Option<LogId>,
    /// The leader's wall clock when it took the backup (Unix ms): how long the old cluster
    /// may have kept issuing fencing tokens is measured from here.
    pub taken_at_ms: i64,
    /// The state machine's own clock at the backup.
    pub state_time: Nanos,
}

/// Why a backup file was refused.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("not a raftlock backup (no RLBACKUP header)")]
    NotABackup,
    #[error("damaged backup: {0}")]
    Damaged(String),
    #[error("backup format {0} is not one this release reads (it reads {BACKUP_FORMAT})")]
    UnknownFormat(u32),
    #[error("{0}")]
    State(String),
    #[error("{0}")]
    Restore(String),
}

/// One data shard's state in a backup.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupBackup {
    /// The shard's group id.
    pub group: GroupId,
    /// Its state, encoded as a snapshot holds it ([`STATE_FORMAT`]-prefixed).
    pub state: Vec<u8>,
}

impl GroupBackup {
    /// A shard's state, encoded for a backup (and for the node that asked for it).
    pub fn new(group: GroupId, state: &SmData) -> Result<GroupBackup, BackupError> {
        let state = encode_state(state).map_err(|e| BackupError::State(e.to_string()))?;
        Ok(GroupBackup { group, state })
    }

    /// The shard's state.
    pub fn decode(&self) -> Result<SmData, BackupError> {
        decode_state(&self.state).map_err(|e| BackupError::State(e.to_string()))
    }
}

/// Encodes a backup of `state` (taken at wall-clock `taken_at_ms` by cluster `cluster_id`).
pub fn write(
    state: &SmData,
    cluster_id: Option<Uuid>,
    taken_at_ms: i64,
) -> Result<Vec<u8>, BackupError> {
    write_with_shards(state, &[], cluster_id, taken_at_ms)
}

/// Encodes a backup of the meta group's `state` and every data shard's (`shards`).
pub fn write_with_shards(
    state: &SmData,
    shards: &[GroupBackup],
    cluster_id: Option<Uuid>,
    taken_at_ms: i64,
) -> Result<Vec<u8>, BackupError> {
    let header = BackupHeader {
        format: BACKUP_FORMAT,
        state_format: STATE_FORMAT,
        cluster_id,
        last_applied: state.last_applied,
        taken_at_ms,
        state_time: state.machine.time(),
    };
    let header = codec::encode(&header).map_err(|e| BackupError::State(e.to_string()))?;
    let body = encode_state(state).map_err(|e| BackupError::State(e.to_string()))?;
    let mut out = Vec::with_capacity(BACKUP_MAGIC.len() + header.len() + body.len() + 16);
    out.extend_from_slice(BACKUP_MAGIC);
    out.extend_from_slice(&codec::frame(&header));
    out.extend_from_slice(&codec::frame(&body));
    for shard in shards {
        let shard = codec::encode(shard).map_err(|e| BackupError::State(e.to_string()))?;
        out.extend_from_slice(&codec::frame(&shard));
    }
    Ok(out)
}

/// Reads the header only, checking every checksum.
pub fn read_header(bytes: &[u8]) -> Result<BackupHeader, BackupError> {
    Ok(frames(bytes)?.0)
}

/// Reads a backup: its header and the meta group's state, checking every checksum and format.
pub fn read(bytes: &[u8]) -> Result<(BackupHeader, SmData), BackupError> {
    let (header, state, _) = read_all(bytes)?;
    Ok((header, state))
}

/// Reads a backup: its header, the meta group's state and every data shard's.
pub fn read_all(bytes: &[u8]) -> Result<(BackupHeader, SmData, Vec<GroupBackup>), BackupError> {
    let (header, body, shards) = frames(bytes)?;
    let state = decode_state(body).map_err(|e| BackupError::State(e.to_string()))?;
    check_matches(&header, &state)?;
    let listed: BTreeSet<GroupId> = state.machine.shards().iter().map(|(id, _)| id).collect();
    let carried: BTreeSet<GroupId> = shards.iter().map(|s| s.group).collect();
    if listed != carried || carried.len() != shards.len() {
        return Err(BackupError::Damaged(format!(
            "the shard map lists shards {listed:?}, the file carries {carried:?}"
        )));
    }
    Ok((header, state, shards))
}

fn frames(bytes: &[u8]) -> Result<(BackupHeader, &[u8], Vec<GroupBackup>), BackupError> {
    let rest = bytes
        .strip_prefix(BACKUP_MAGIC.as_slice())
        .ok_or(BackupError::NotABackup)?;
    let frame = |at| match codec::read_frame(rest, at) {
        codec::FrameRead::Frame { payload, next } => Ok((payload, next)),
        codec::FrameRead::End => Err(BackupError::Damaged("file ends early".into())),
        codec::FrameRead::Bad { reason, .. } => Err(BackupError::Damaged(reason.into())),
    };
    let (header, next) = frame(0)?;
    // The format number leads the header, so an unknown layout is named, not "damaged".
    let format: u32 =
        codec::decode(header).map_err(|e| BackupError::Damaged(format!("header: {e}")))?;
    if format != BACKUP_FORMAT && format != BACKUP_FORMAT_V1 {
        return Err(BackupError::UnknownFormat(format));
    }
    let header: BackupHeader =
        codec::decode(header).map_err(|e| BackupError::Damaged(format!("header: {e}")))?;
    let (body, mut at) = frame(next)?;
    let mut shards = Vec::new();
    while at != rest.len() {
        if format == BACKUP_FORMAT_V1 {
            return Err(BackupError::Damaged("bytes after the state".into()));
        }
        let (shard, next) = frame(at)?;
        let shard: GroupBackup =
            codec::decode(shard).map_err(|e| BackupError::Damaged(format!("shard: {e}")))?;
        shards.push(shard);
        at = next;
    }
    Ok((header, body, shards))
}

/// The fencing-token skip of `restore` into the cluster `cluster_id`
/// ([`restored_cluster_id`]): [`RESTORE_FENCING_SKIP`] past what the old cluster may have
/// issued, plus the cluster's [`token_offset`]; refused for a backup older than
/// [`MAX_BACKUP_AGE_SECONDS`], which the skip could not cover.
pub fn fencing_skip(
    header: &BackupHeader,
    restore: &RestoreId,
    cluster_id: &Uuid,
) -> Result<u64, BackupError> {
    let now_ms = restore.at_ms();
    let age_s = (now_ms - header.taken_at_ms).max(0) as u64 / 1000;
    if age_s > MAX_BACKUP_AGE_SECONDS {
        return Err(BackupError::Restore(format!(
            "the backup is {} days old; a restore can only skip the fencing tokens of {} days",
            age_s / 86_400,
            MAX_BACKUP_AGE_SECONDS / 86_400
        )));
    }
    Ok(RESTORE_FENCING_SKIP + token_offset(cluster_id))
}

/// Where in [0, [`RESTORE_TOKEN_SPREAD`]) the tokens of the restored cluster `cluster_id`
/// start beyond [`RESTORE_FENCING_SKIP`]: 47 bits of a SHA-1 of the id (a version-5 UUID, so
/// no new dependency). The cluster id already hashes the backup, the peers and the restore
/// id; hashing it again under its own label makes the offset of two restores two independent
/// uniform draws — unlike bits taken from the restore id itself, which a hand-written id
/// need not spread and which would give two clusters of one id with other `--peers` the
/// same tokens.
pub fn token_offset(cluster_id: &Uuid) -> u64 {
    let label = format!("raftlock-restore-tokens:{cluster_id}");
    let hash = Uuid::new_v5(&Uuid::NAMESPACE_OID, label.as_bytes());
    // The last 8 bytes: 62 hash bits under the 2 variant bits; the low 47 are taken.
    (hash.as_u128() as u64) % RESTORE_TOKEN_SPREAD
}

/// Refuses a header and a state that were not written together (frames of two backups).
fn check_matches(header: &BackupHeader, state: &SmData) -> Result<(), BackupError> {
    if header.last_applied != state.last_applied || header.state_time != state.machine.time() {
        return Err(BackupError::Damaged(
            "the header does not describe the state it carries".into(),
        ));
    }
    Ok(())
}

/// The id every node of `restore` from `header` with `peers` gets: derived from all three, so
/// restoring each node separately gives them one id, never the old cluster's, and never
/// another restore's (a version-5 UUID: two distinct inputs collide with probability 2^-122).
pub fn restored_cluster_id(
    header: &BackupHeader,
    peers: &BTreeMap<NodeId, String>,
    restore: &RestoreId,
) -> Uuid {
    let seed = format!(
        "raftlock-restore:{:?}:{:?}:{}:{:?}:{}",
        header.cluster_id, header.last_applied, header.taken_at_ms, peers, restore
    );
    Uuid::new_v5(&Uuid::NAMESPACE_OID, seed.as_bytes())
}

/// What a restore made of a node's data directory: the same for every node of one restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The new cluster's id ([`restored_cluster_id`]).
    pub cluster_id: Uuid,
    /// How far every fencing-token counter moved ([`fencing_skip`]).
    pub fencing_skip: u64,
    /// The next project-lock fencing token of the restored cluster.
    pub next_fencing_token: u64,
    /// The restored state's time (Unix ns): the restore's moment, or the backup's own time if
    /// that is later.
    pub state_time: Nanos,
}

/// Prepares the empty data directory `dir` as node `node_id` of `restore`, a new cluster of
/// `peers` holding the backed-up state: a new cluster id, tokens moved forward
/// ([`fencing_skip`]), time moved to the restore's moment. A function of its arguments only
/// (never of this machine's clock): every node of one restore gets byte-identical state.
pub fn restore_into(
    dir: &Path,
    header: &BackupHeader,
    state: SmData,
    node_id: NodeId,
    peers: &BTreeMap<NodeId, String>,
    restore: &RestoreId,
) -> Result<Restored, BackupError> {
    if !peers.contains_key(&node_id) {
        return Err(BackupError::Restore(format!(
            "--peers does not list node {node_id}"
        )));
    }
    let index = header.last_applied.map_or(0, |id| id.index);
    let voters = (peers.iter())
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect();
    let new = NewGroup::of(header, peers, restore, index, voters)?;
    prepare(dir, state, &new, restore)
}

/// Prepares the empty directory `dir` as this node's replica of data shard `shard` of
/// `restore` (`groups/<id>/` of a data directory [`restore_into`] made): the shard's state
/// with its tokens moved as the meta group's are and its time moved to the restore's moment,
/// voted by `members` at their `peers` addresses. Like [`restore_into`], a function of its
/// arguments only.
pub fn restore_shard_into(
    dir: &Path,
    header: &BackupHeader,
    shard: &GroupBackup,
    members: &BTreeSet<NodeId>,
    peers: &BTreeMap<NodeId, String>,
    restore: &RestoreId,
) -> Result<Restored, BackupError> {
    let state = shard.decode()?;
    let voters = (members.iter())
        .map(|id| match peers.get(id) {
            Some(addr) => Ok((*id, BasicNode::new(addr))),
            None => Err(BackupError::Restore(format!(
                "shard {} lives on node {id}, which --peers does not list",
                shard.group
            ))),
        })
        .collect::<Result<_, _>>()?;
    let index = state.last_applied.map_or(0, |id| id.index);
    let new = NewGroup::of(header, peers, restore, index, voters)?;
    prepare(dir, state, &new, restore)
}

/// What a restored group starts from, besides its state.
struct NewGroup {
    cluster_id: Uuid,
    skip: u64,
    /// The index of its snapshot (the backed-up state's last applied entry).
    index: u64,
    voters: BTreeMap<NodeId, BasicNode>,
}

impl NewGroup {
    /// A group of the cluster `restore` makes from `header` with `peers`: every group of it
    /// gets the same cluster id and token skip.
    fn of(
        header: &BackupHeader,
        peers: &BTreeMap<NodeId, String>,
        restore: &RestoreId,
        index: u64,
        voters: BTreeMap<NodeId, BasicNode>,
    ) -> Result<NewGroup, BackupError> {
        let cluster_id = restored_cluster_id(header, peers, restore);
        let skip = fencing_skip(header, restore, &cluster_id)?;
        Ok(NewGroup {
            cluster_id,
            skip,
            index,
            voters,
        })
    }
}

/// Writes `state`, moved for `restore`, into the empty directory `dir` as a snapshot of
/// `new`'s membership, with the new cluster id.
fn prepare(
    dir: &Path,
    mut state: SmData,
    new: &NewGroup,
    restore: &RestoreId,
) -> Result<Restored, BackupError> {
    let fail = |e: &dyn std::fmt::Display| BackupError::Restore(format!("{}: {e}", dir.display()));
    let next_fencing_token = state
        .machine
        .skip_fencing_tokens(new.skip)
        .map_err(|e| fail(&e))?;
    // Time starts from the restore's moment, not the backup's: a tick at that time, as the
    // first entry after the restore would be (it reaps what expired meanwhile). Never back.
    let restored_at = restore.at_ms().saturating_mul(1_000_000);
    state.machine.apply(&raftlock_core::Command {
        stamp: restored_at,
        ops: Vec::new(),
    });
    let state_time = state.machine.time();
    if dir.exists() {
        if std::fs::read_dir(dir)
            .map_err(|e| fail(&e))?
            .next()
            .is_some()
        {
            return Err(BackupError::Restore(format!(
                "{} is not empty: restore only into a new data directory",
                dir.display()
            )));
        }
        std::fs::remove_dir(dir).map_err(|e| fail(&e))?;
    }
    // Everything is written into a sibling directory renamed into place at the end, so a
    // failed restore leaves no half-prepared data directory behind.
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = dir.with_file_name(format!(".{name}.restoring"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| fail(&e))?;
    }
    std::fs::create_dir_all(&staging).map_err(|e| fail(&e))?;
    let log_id = LogId::new(CommittedLeaderId::new(0, 0), new.index);
    let voter_ids: BTreeSet<NodeId> = new.voters.keys().copied().collect();
    let membership = StoredMembership::new(
        Some(log_id),
        Membership::new(vec![voter_ids], new.voters.clone()),
    );
    state.last_applied = Some(log_id);
    state.last_membership = membership.clone();
    let data = encode_state(&state).map_err(|e| fail(&e))?;
    let snapshot = StoredSnapshot {
        meta: SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: membership,
            snapshot_id: format!("restored-{}", new.index),
        },
        data,
    };
    let os_dir: Arc<dyn Dir> = Arc::new(OsDir::open(&staging).map_err(|e| fail(&e))?);
    checked_file::save(&*os_dir, SNAPSHOT_FILE, SNAPSHOT_MAGIC, &snapshot).map_err(|e| fail(&e))?;
    ClusterIdentity::open_in(os_dir)
        .and_then(|identity| identity.set_new(new.cluster_id))
        .map_err(|e| fail(&e))?;
    std::fs::rename(&staging, dir).map_err(|e| fail(&e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail(&e))?;
    }
    Ok(Restored {
        cluster_id: new.cluster_id,
        fencing_skip: new.skip,
        next_fencing_token,
        state_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use raftlock_core::command::LockAction;
    use raftlock_core::{Command, Op, StateMachine};

    fn sample() -> SmData {
        let mut machine = StateMachine::default();
        let ops = vec![
            Op::CreateProject { name: "p".into() },
            Op::ProjectLock {
                project: "p".into(),
                key: "k".into(),
                action: LockAction::Acquire {
                    token: 1,
                    ttl_seconds: 60,
                },
            },
        ];
        for out in machine.apply(&Command {
            stamp: 1_700_000_000_000_000_000,
            ops,
        }) {
            out.unwrap();
        }
        SmData {
            last_applied: Some(LogId::new(CommittedLeaderId::new(3, 1), 42)),
            last_membership: StoredMembership::default(),
            machine,
        }
    }

    #[test]
    fn a_format_1_backup_is_read_as_one_without_shards() {
        let state = sample();
        let (mut header, _) = read(&write(&state, None, 1_000).unwrap()).unwrap();
        header.format = BACKUP_FORMAT_V1;
        let mut v1 = BACKUP_MAGIC.to_vec();
        v1.extend_from_slice(&codec::frame(&codec::encode(&header).unwrap()));
        v1.extend_from_slice(&codec::frame(&encode_state(&state).unwrap()));
        let (read_header, read_state, shards) = read_all(&v1).unwrap();
        assert_eq!(read_header.format, 1);
        assert_eq!(read_state.machine, state.machine);
        assert!(shards.is_empty());
        let mut trailing = v1.clone();
        trailing.extend_from_slice(&codec::frame(b"more"));
        assert!(matches!(read_all(&trailing), Err(BackupError::Damaged(_))));
    }

    #[test]
    fn shards_travel_with_the_meta_group_and_must_match_its_map() {
        let mut meta = sample();
        let shard = GroupBackup::new(1, &sample()).unwrap();
        // The map lists no shard: a file carrying one is two backups spliced together.
        let spliced = write_with_shards(&meta, std::slice::from_ref(&shard), None, 1_000).unwrap();
        assert!(matches!(read_all(&spliced), Err(BackupError::Damaged(_))));
        meta.machine.apply(&Command {
            stamp: 1_700_000_000_000_000_001,
            ops: vec![Op::CreateShard {
                members: [1, 2, 3].into(),
            }],
        });
        let whole = write_with_shards(&meta, &[shard], None, 1_000).unwrap();
        let (header, state, shards) = read_all(&whole).unwrap();
        assert_eq!(header.format, BACKUP_FORMAT);
        assert_eq!(state.machine, meta.machine);
        assert_eq!(shards.len(), 1);
        assert_eq!(shards[0].decode().unwrap().machine, sample().machine);
        let missing = write_with_shards(&meta, &[], None, 1_000).unwrap();
        assert!(
            matches!(read_all(&missing), Err(BackupError::Damaged(_))),
            "a shard left out"
        );
    }

    #[test]
    fn a_backup_round_trips_and_any_flipped_byte_is_refused() {
        let state = sample();
        let bytes = write(&state, Some(Uuid::nil()), 1_000).unwrap();
        let (header, back) = read(&bytes).unwrap();
        assert_eq!(back.machine, state.machine);
        assert_eq!(header.last_applied, state.last_applied);
        for at in [0, 9, 20, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(read(&bad).is_err(), "flip at {at} accepted");
        }
        assert!(matches!(read(b"hello"), Err(BackupError::NotABackup)));
        assert!(read(&bytes[..bytes.len() - 3]).is_err());
    }

    #[test]
    fn a_header_spliced_onto_another_backups_state_is_refused() {
        let a = write(&sample(), None, 1_000).unwrap();
        let mut other = sample();
        other.last_applied = Some(LogId::new(CommittedLeaderId::new(3, 1), 7));
        let b = write(&other, None, 1_000).unwrap();
        let header_end = |bytes: &[u8]| match codec::read_frame(&bytes[8..], 0) {
            codec::FrameRead::Frame { next, .. } => 8 + next,
            _ => panic!("header frame"),
        };
        let mut spliced = a[..header_end(&a)].to_vec();
        spliced.extend_from_slice(&b[header_end(&b)..]);
        let err = read(&spliced).unwrap_err().to_string();
        assert!(err.contains("does not describe"), "{err}");
    }

    #[test]
    fn an_unknown_format_is_named() {
        let mut header = codec::encode(&BackupHeader {
            format: 99,
            state_format: STATE_FORMAT,
            cluster_id: None,
            last_applied: None,
            taken_at_ms: 0,
            state_time: 0,
        })
        .unwrap();
        let mut bytes = BACKUP_MAGIC.to_vec();
        bytes.append(&mut codec::frame(&std::mem::take(&mut header)));
        bytes.append(&mut codec::frame(b""));
        let err = read(&bytes).unwrap_err().to_string();
        assert!(err.contains("format 99"), "{err}");
    }

    /// A restore id of `at_ms` whose random bits are `random`.
    fn restore_at(at_ms: i64, random: u64) -> RestoreId {
        let ts = uuid::Timestamp::from_unix(
            uuid::NoContext,
            (at_ms / 1000) as u64,
            (at_ms % 1000) as u32 * 1_000_000,
        );
        let mut bytes = *Uuid::new_v7(ts).as_bytes();
        // new_v7 draws 12 random bits after the timestamp: fixed here (version 7 kept), so a
        // test's ids are the same on every run.
        bytes[6] = 0x70;
        bytes[7] = 0;
        bytes[8..].copy_from_slice(&(random | 0x8000_0000_0000_0000).to_be_bytes());
        RestoreId(Uuid::from_bytes(bytes))
    }

    #[test]
    fn two_restores_of_one_backup_are_two_clusters_with_their_own_tokens() {
        let (header, _) = read(&write(&sample(), Some(Uuid::nil()), 1_000).unwrap()).unwrap();
        let peers: BTreeMap<u64, String> = [(1, "a:1".to_string())].into();
        let (a, b) = (restore_at(5_000, 1), restore_at(5_000, 2));
        let (id_a, id_b) = (
            restored_cluster_id(&header, &peers, &a),
            restored_cluster_id(&header, &peers, &b),
        );
        assert_ne!(id_a, id_b);
        let (skip_a, skip_b) = (
            fencing_skip(&header, &a, &id_a).unwrap(),
            fencing_skip(&header, &b, &id_b).unwrap(),
        );
        assert_ne!(skip_a, skip_b);
        for skip in [skip_a, skip_b] {
            assert!(
                (RESTORE_FENCING_SKIP..RESTORE_FENCING_SKIP + RESTORE_TOKEN_SPREAD).contains(&skip)
            );
        }
        // Every input counts: another restore moment, other peers, another backup.
        let other_peers: BTreeMap<u64, String> = [(1, "a:2".to_string())].into();
        let mut later = header.clone();
        later.taken_at_ms += 1;
        for other in [
            restored_cluster_id(&header, &peers, &restore_at(5_001, 1)),
            restored_cluster_id(&header, &other_peers, &a),
            restored_cluster_id(&later, &peers, &a),
        ] {
            assert_ne!(other, id_a);
        }
        // The same inputs, the same answer (every node of one restore).
        assert_eq!(restored_cluster_id(&header, &peers, &a), id_a);
        assert_eq!(fencing_skip(&header, &a, &id_a).unwrap(), skip_a);
        // A minted id carries its moment, and only a version-7 id is taken.
        let minted = RestoreId::mint();
        assert!((minted.at_ms() - chrono_free_now_ms()).abs() < 5_000);
        assert_eq!(RestoreId::parse(&minted.to_string()).unwrap(), minted);
        assert!(RestoreId::parse(&Uuid::new_v4().to_string()).is_err());
        assert!(RestoreId::parse("nope").is_err());
        // An id from the future (a restoring machine's clock ahead) is refused.
        assert!(a.check_not_ahead(5_000 - MAX_RESTORE_ID_AHEAD_MS).is_ok());
        let err = a.check_not_ahead(5_000 - MAX_RESTORE_ID_AHEAD_MS - 1);
        assert!(err.unwrap_err().to_string().contains("future"));
    }

    /// The token offsets of restores are spread over the whole range like independent uniform
    /// draws, even for restore ids that differ in one bit (hand-written or minted in one
    /// millisecond): what the documented collision bound assumes.
    #[test]
    fn token_offsets_spread_uniformly_even_for_neighbouring_ids() {
        let (header, _) = read(&write(&sample(), Some(Uuid::nil()), 1_000).unwrap()).unwrap();
        let peers: BTreeMap<u64, String> = [(1, "a:1".to_string())].into();
        let n = 4096u64;
        let mut offsets: Vec<u64> = (0..n)
            .map(|i| token_offset(&restored_cluster_id(&header, &peers, &restore_at(5_000, i))))
            .collect();
        assert!(offsets.iter().all(|o| *o < RESTORE_TOKEN_SPREAD));
        // Each eighth of the range holds its share (n/8 = 512, ± 5 standard deviations).
        for eighth in 0..8 {
            let lo = eighth * (RESTORE_TOKEN_SPREAD / 8);
            let count = offsets
                .iter()
                .filter(|o| (lo..lo + RESTORE_TOKEN_SPREAD / 8).contains(*o))
                .count() as f64;
            assert!(
                (count - 512.0).abs() < 5.0 * 21.2,
                "eighth {eighth}: {count}"
            );
        }
        // No two of them closer than 2^16 tokens: uniform draws have on average
        // (n^2 / 2) * 2 * 2^16 / 2^47 = 2^-7 such pairs (these ids are fixed, so the answer
        // never changes). The slot scheme this replaced (2^16 slots of 2^32 tokens) put two
        // of 4096 ids in one slot — the same tokens — on average 128 times.
        offsets.sort_unstable();
        let closest = offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        assert!(closest > 1 << 16, "two offsets {closest} apart");
    }

    fn chrono_free_now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }

    /// Each restore moves tokens by at most 5 × 2^45: 25 generations of restores of restores
    /// fit in (2^52, 2^53); a restore that would leave the range is refused and leaves no
    /// directory behind.
    #[test]
    fn restores_of_restores_fit_until_the_range_ends_then_are_refused() {
        assert_eq!(RESTORE_FENCING_SKIP + RESTORE_TOKEN_SPREAD, 5 << 45);
        let peers: BTreeMap<u64, String> = [(1, "a:1".to_string())].into();
        let dir = tempfile::tempdir().unwrap();
        let mut state = sample();
        let mut generations = 0;
        loop {
            let bytes = write(&state, Some(Uuid::nil()), 1_000).unwrap();
            let (header, backed_up) = read(&bytes).unwrap();
            let target = dir.path().join(generations.to_string());
            match restore_into(
                &target,
                &header,
                backed_up,
                1,
                &peers,
                &restore_at(2_000, 9),
            ) {
                Ok(restored) => {
                    assert!(restored.next_fencing_token < 1 << 53);
                    let (_log, sm) = crate::open(&target).unwrap();
                    state = sm.shared().read().unwrap().clone();
                    generations += 1;
                }
                Err(e) => {
                    assert!(e.to_string().contains("(2^52, 2^53)"), "{e}");
                    assert!(
                        !target.exists(),
                        "a refused restore left {}",
                        target.display()
                    );
                    break;
                }
            }
        }
        assert!(generations >= 25, "{generations} generations");
    }

    #[test]
    fn restore_prepares_a_directory_once_and_moves_fencing_forward() {
        let state = sample();
        let before = state.machine.summary().next_fencing_token;
        let before_semaphores = state.machine.summary().next_semaphore_fencing_token;
        let taken_at = 1_700_000_000_000; // the sample's own time, in ms
        let bytes = write(&state, Some(Uuid::nil()), taken_at).unwrap();
        let (header, state) = read(&bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let peers: BTreeMap<u64, String> = [(1, "a:1".to_string()), (2, "b:1".to_string())].into();
        let restore = restore_at(taken_at + 20_000, 7);
        let too_old = taken_at + (MAX_BACKUP_AGE_SECONDS as i64 + 1) * 1000;
        assert!(fencing_skip(&header, &restore_at(too_old, 7), &Uuid::nil()).is_err());
        let restored =
            restore_into(dir.path(), &header, state.clone(), 1, &peers, &restore).unwrap();
        let (id, skip) = (restored.cluster_id, restored.fencing_skip);
        assert_ne!(id, Uuid::nil(), "a new cluster id");
        assert_eq!(
            id,
            restored_cluster_id(&header, &peers, &restore),
            "the same for every node"
        );
        assert_eq!(skip, fencing_skip(&header, &restore, &id).unwrap());
        assert_eq!(restored.next_fencing_token, before + skip);
        assert_eq!(restored.state_time, (taken_at + 20_000) * 1_000_000);
        // Node 2 of the same restore, elsewhere: byte-identical state.
        let other = tempfile::tempdir().unwrap();
        let restored_2 = restore_into(
            &other.path().join("2"),
            &header,
            state.clone(),
            2,
            &peers,
            &restore,
        )
        .unwrap();
        assert_eq!(restored_2, restored);
        assert_eq!(
            std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap(),
            std::fs::read(other.path().join("2").join(SNAPSHOT_FILE)).unwrap()
        );
        // The directory opens as a node whose state is the backup's, tokens moved forward.
        let (_log, sm) = crate::open(dir.path()).unwrap();
        let restored = sm.shared();
        let restored = restored.read().unwrap();
        assert_eq!(restored.machine.summary().project_locks, 1);
        assert_eq!(restored.machine.summary().next_fencing_token, before + skip);
        assert_eq!(
            restored.machine.summary().next_semaphore_fencing_token,
            before_semaphores + skip,
            "semaphore tokens move forward too"
        );
        assert_eq!(restored.last_applied.unwrap().index, 42);
        assert_eq!(
            restored.machine.time(),
            (taken_at + 20_000) * 1_000_000,
            "time starts from the restore, 20 s after the backup"
        );
        drop(restored);
        drop((_log, sm));
        let again = restore_into(dir.path(), &header, state, 1, &peers, &restore);
        assert!(again.unwrap_err().to_string().contains("not empty"));
    }
}
