//! Cluster identity: a UUID created when a cluster is initialized and kept by every node in its
//! data directory (`cluster_id`, a checked file).
//!
//! Every peer stream presents it in [`CLUSTER_ID_HEADER`] when it is opened (and every frame is
//! checked against it), as does every forwarded request. A node that has an id refuses (409, or
//! a refused frame on an open stream) traffic carrying another id or none, so a reused volume or a restored copy
//! of another cluster can never append to, vote in or overwrite this cluster's log. A node
//! without an id (a fresh or wiped data directory) adopts the id of the first authenticated
//! peer that contacts it, durably, before it handles the request: that is how it joins.

use std::path::Path;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::checked_file;
use crate::error::StoreError;
use crate::fs::{Dir, OsDir};

/// Header carrying the sender's cluster id on node-to-node requests.
pub const CLUSTER_ID_HEADER: &str = "x-raftlock-cluster-id";

const FILE: &str = "cluster_id";
const MAGIC: &[u8; 8] = b"RLCLSTID";

/// This node's cluster id, shared by the network, the RPC router and request forwarding.
#[derive(Clone)]
pub struct ClusterIdentity {
    /// Where the id is persisted.
    dir: Arc<dyn Dir>,
    /// The id, once created or adopted. A mutex (not a lock-free cell) so two first contacts
    /// cannot adopt two different ids.
    id: Arc<Mutex<Option<Uuid>>>,
}

impl ClusterIdentity {
    /// Loads the id kept in the data directory `path`, if any.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let dir: Arc<dyn Dir> =
            Arc::new(OsDir::open(path).map_err(|e| StoreError::io(path.display().to_string(), e))?);
        Self::open_in(dir)
    }

    /// Like [`Self::open`] over any [`Dir`].
    pub fn open_in(dir: Arc<dyn Dir>) -> Result<Self, StoreError> {
        let id = checked_file::load::<Uuid>(&*dir, FILE, MAGIC)?;
        Ok(ClusterIdentity {
            dir,
            id: Arc::new(Mutex::new(id)),
        })
    }

    /// The id, if this node has one yet.
    pub fn get(&self) -> Option<Uuid> {
        *self.lock()
    }

    /// The id, creating (and persisting) a new one if this node has none: called right before
    /// initializing a cluster.
    pub fn get_or_create(&self) -> Result<Uuid, StoreError> {
        let mut id = self.lock();
        if let Some(existing) = *id {
            return Ok(existing);
        }
        let fresh = Uuid::new_v4();
        checked_file::save(&*self.dir, FILE, MAGIC, &fresh)?;
        *id = Some(fresh);
        Ok(fresh)
    }

    /// Sets the id of a data directory that has none (a restore prepares a new cluster's
    /// directories with the id they will share). Refuses to replace another id.
    pub fn set_new(&self, fresh: Uuid) -> Result<(), StoreError> {
        let mut id = self.lock();
        if let Some(existing) = *id {
            if existing != fresh {
                return Err(StoreError::Foreign {
                    file: FILE.into(),
                    reason: format!("already belongs to cluster {existing}"),
                });
            }
            return Ok(());
        }
        checked_file::save(&*self.dir, FILE, MAGIC, &fresh)?;
        *id = Some(fresh);
        Ok(())
    }

    /// Decides whether a request presenting `presented` (the header value, if any) may be
    /// handled here, adopting the presented id when this node has none. A refusal is logged and
    /// counted in `raftlock_peer_refused_total{reason="cluster_id"}` here, once for every caller.
    pub fn check_peer(&self, presented: Option<&[u8]>) -> Result<(), Refusal> {
        let decision = self.decide(presented);
        if let Err(refusal) = &decision {
            tracing::error!(%refusal, "refused a node-to-node request");
            metrics::counter!("raftlock_peer_refused_total", "reason" => "cluster_id").increment(1);
        }
        decision
    }

    fn decide(&self, presented: Option<&[u8]>) -> Result<(), Refusal> {
        let presented = match presented {
            None => None,
            Some(bytes) => Some(
                std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|s| Uuid::parse_str(s).ok())
                    .ok_or(Refusal::Malformed)?,
            ),
        };
        let mut id = self.lock();
        match (*id, presented) {
            (Some(ours), Some(theirs)) if ours == theirs => Ok(()),
            (Some(ours), Some(theirs)) => Err(Refusal::OtherCluster { ours, theirs }),
            (Some(ours), None) => Err(Refusal::Missing { ours }),
            (None, None) => Ok(()),
            (None, Some(theirs)) => {
                checked_file::save(&*self.dir, FILE, MAGIC, &theirs)
                    .map_err(|e| Refusal::Storage(e.to_string()))?;
                tracing::info!(cluster_id = %theirs, "joined cluster");
                *id = Some(theirs);
                Ok(())
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Uuid>> {
        self.id.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why a node-to-node request was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("request from cluster {theirs}, but this node belongs to cluster {ours}; a data directory of another cluster must not be mixed into this one")]
    OtherCluster { ours: Uuid, theirs: Uuid },
    #[error("request without a cluster id, but this node belongs to cluster {ours}")]
    Missing { ours: Uuid },
    #[error("malformed cluster id header")]
    Malformed,
    #[error("cannot persist the cluster id: {0}")]
    Storage(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_fs::SimDir;

    #[test]
    fn adopts_once_then_refuses_other_clusters_and_survives_reopen() {
        let dir: Arc<dyn Dir> = Arc::new(SimDir::new());
        let identity = ClusterIdentity::open_in(dir.clone()).unwrap();
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        identity.check_peer(Some(a.to_string().as_bytes())).unwrap();
        assert!(matches!(
            identity.check_peer(Some(b.to_string().as_bytes())),
            Err(Refusal::OtherCluster { .. })
        ));
        assert!(matches!(
            identity.check_peer(None),
            Err(Refusal::Missing { .. })
        ));
        assert!(matches!(
            identity.check_peer(Some(b"nope")),
            Err(Refusal::Malformed)
        ));
        let reopened = ClusterIdentity::open_in(dir).unwrap();
        assert_eq!(reopened.get(), Some(a));
        assert_eq!(reopened.get_or_create().unwrap(), a);
    }
}
