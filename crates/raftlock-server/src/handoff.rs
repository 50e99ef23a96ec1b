//! Leadership hand-off: the leader passes leadership to a caught-up follower before it stops
//! (SIGTERM) or when an operator asks (`POST /admin/v1/cluster/leader`), so clients see a
//! short pause instead of an election timeout and a burst of 503s.
//!
//! openraft 0.9 has no leadership transfer, so it is built from what it has:
//! 1. the leader stops proposing ([`crate::proposer::Proposer::hold`]); writes that arrive
//!    wait in the queue;
//! 2. it waits until the target has every entry of its log;
//! 3. it stops its heartbeats and asks the target to campaign ([`CAMPAIGN_PATH`], which runs
//!    `trigger().elect()` there). The old leader grants the vote (the target's log is as long
//!    as its own); other followers grant it once their leader lease (one election timeout
//!    after the last heartbeat) has lapsed, which a 5-voter cluster needs;
//! 4. once another leader is known it lets the queue go: each held write is refused as
//!    "not proposed" by Raft and sent on to the new leader by [`crate::http::forward`].
//!
//! The node that stops never campaigns again (elections off), so leadership cannot bounce
//! back to it.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use crate::election::PeerGroup;
use crate::group::Group;
use crate::headers::GROUP_HEADER;
use crate::node::SharedNode;

/// Internal route that makes a node campaign (cluster secret required).
pub const CAMPAIGN_PATH: &str = "/internal/leader/campaign";
/// How often the target is asked again while leadership has not moved.
const NUDGE_EVERY: Duration = Duration::from_millis(150);

/// Why a hand-off did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HandOffError {
    #[error("this node is not the leader")]
    NotLeader,
    #[error("node {0} is not a voter of this cluster")]
    NotAVoter(u64),
    #[error("no other voter to hand leadership to")]
    NoCandidate,
    #[error("node {0} did not catch up in time")]
    NotCaughtUp(u64),
    #[error("leadership did not move in time")]
    TimedOut,
}

/// Hands leadership to `target` (or the most caught-up other voter) within `bound`; returns
/// the new leader's id. Writes are held (not refused) meanwhile.
pub async fn hand_off(
    node: &SharedNode,
    group: &Group,
    target: Option<u64>,
    bound: Duration,
) -> Result<u64, HandOffError> {
    let started = Instant::now();
    let deadline = started + bound;
    if !group.is_leader() {
        return Err(HandOffError::NotLeader);
    }
    let target = choose_target(node, group, target)?;
    tracing::info!(target, group = group.id, "handing leadership over");
    let hold = tokio::time::timeout_at(deadline, group.hold_writes())
        .await
        .map_err(|_| HandOffError::TimedOut)?;
    let result = move_leadership(node, group, target, deadline).await;
    // Let held writes go: on a deposed leader Raft refuses them unproposed and the forward
    // layer sends them to the new leader; if the hand-off failed they are proposed here.
    drop(hold);
    group.raft.runtime_config().heartbeat(true);
    match &result {
        Ok(leader) => {
            metrics::counter!("raftlock_leader_handoffs_total").increment(1);
            tracing::info!(leader, group = group.id, took = ?started.elapsed(), "leadership handed over");
        }
        Err(e) => tracing::warn!(error = %e, "leadership hand-off failed"),
    }
    result
}

/// The voter to hand leadership to: `wanted` if it is a voter other than this node, else the
/// other voter with the longest replicated log.
fn choose_target(
    node: &SharedNode,
    group: &Group,
    wanted: Option<u64>,
) -> Result<u64, HandOffError> {
    let me = node.config.node_id;
    let metrics = group.raft.metrics().borrow().clone();
    let voters: Vec<u64> = metrics
        .membership_config
        .membership()
        .voter_ids()
        .filter(|id| *id != me)
        .collect();
    if let Some(id) = wanted {
        return if voters.contains(&id) {
            Ok(id)
        } else {
            Err(HandOffError::NotAVoter(id))
        };
    }
    let matched = |id: &u64| {
        metrics
            .replication
            .as_ref()
            .and_then(|r| r.get(id).cloned().flatten())
            .map_or(0, |log_id| log_id.index)
    };
    voters
        .iter()
        .max_by_key(|id| (matched(id), std::cmp::Reverse(**id)))
        .copied()
        .ok_or(HandOffError::NoCandidate)
}

async fn move_leadership(
    node: &SharedNode,
    group: &Group,
    target: u64,
    deadline: Instant,
) -> Result<u64, HandOffError> {
    wait_caught_up(node, group, target, deadline).await?;
    tracing::debug!("hand-off target caught up");
    // Followers refuse votes while they hear from a leader (their leader lease): go quiet.
    group.raft.runtime_config().heartbeat(false);
    let addr = group
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&target)
        .map(|n| n.addr.clone())
        .ok_or(HandOffError::NotAVoter(target))?;
    let mut metrics = group.raft.metrics();
    loop {
        ask_to_campaign(node, group, &addr).await;
        let nudge = (Instant::now() + NUDGE_EVERY).min(deadline);
        while Instant::now() < nudge {
            if let Some(leader) = moved_to(node, group) {
                return Ok(leader);
            }
            if tokio::time::timeout_at(nudge, metrics.changed())
                .await
                .is_err()
            {
                break;
            }
        }
        if let Some(leader) = moved_to(node, group) {
            return Ok(leader);
        }
        if Instant::now() >= deadline {
            return Err(HandOffError::TimedOut);
        }
    }
}

/// The new leader, once one other than this node is known.
fn moved_to(node: &SharedNode, group: &Group) -> Option<u64> {
    let leader = group.raft.metrics().borrow().current_leader?;
    (leader != node.config.node_id).then_some(leader)
}

/// Waits until `target` has replicated this leader's whole log.
async fn wait_caught_up(
    node: &SharedNode,
    group: &Group,
    target: u64,
    deadline: Instant,
) -> Result<(), HandOffError> {
    let mut metrics = group.raft.metrics();
    loop {
        let caught_up = {
            let m = metrics.borrow();
            if m.current_leader != Some(node.config.node_id) {
                return Err(HandOffError::NotLeader);
            }
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&target).cloned().flatten())
                .map(|id| id.index);
            matched.is_some() && matched >= m.last_log_index
        };
        if caught_up {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, metrics.changed())
            .await
            .is_err()
        {
            return Err(HandOffError::NotCaughtUp(target));
        }
    }
}

/// One campaign request to the node at `addr`; failures are only logged (the caller asks
/// again until leadership moves or its deadline passes).
async fn ask_to_campaign(node: &SharedNode, group: &Group, addr: &str) {
    let req = node
        .peer_request(reqwest::Method::POST, &node.peer_url(addr, CAMPAIGN_PATH))
        .header(GROUP_HEADER, group.id.to_string())
        .timeout(Duration::from_millis(500));
    match req.send().await {
        Ok(resp) if resp.status().is_success() => {}
        Ok(resp) => tracing::debug!(status = %resp.status(), "campaign request refused"),
        Err(e) => tracing::debug!(error = %e, "campaign request failed"),
    }
}

/// `POST /internal/leader/campaign`: start an election now, unless this node's clock is
/// unfit to lead (the same rule that switches its elections off, see [`crate::clock`]).
pub async fn campaign(PeerGroup(group): PeerGroup) -> Response {
    if !group.may_campaign() {
        return (StatusCode::CONFLICT, "clock unfit to lead").into_response();
    }
    match group.raft.trigger().elect().await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}
