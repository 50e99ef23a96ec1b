//! Elections with pre-vote.
//!
//! openraft 0.9 campaigns on its own timer, bumping its term each time. A node cut off from
//! the others (a partition, a long pause) campaigns again and again; when it can talk again,
//! its higher term makes the healthy leader step down — an election nobody needed, and a
//! pause for every client. Raft's pre-vote prevents that; openraft 0.9 does not have it, so
//! it is built here:
//!
//! openraft's own elections are switched off for the node's whole life, and [`spawn`]'s driver
//! starts one with `trigger().elect()` only when
//! 1. this node is a voter, not the leader, and not stopping;
//! 2. it has not heard from a leader for the lease plus its own election timeout (what
//!    openraft itself would wait; see `crate::node`);
//! 3. its clock lets it lead (`crate::clock`, the clock-safety rule);
//! 4. a majority of voters, itself included, grant a pre-vote ([`PREVOTE_PATH`]): a voter
//!    grants if it is not the leader, has not heard from one within the lease, and the
//!    candidate's log is at least as up to date as its own (so a stale node cannot keep
//!    bumping the term while an up-to-date one tries to win). A voter that granted leaves
//!    the campaign to that candidate for one lease instead of racing it.
//!
//! A node that cannot reach a majority never passes 4, so its term never moves; back in
//! contact, it just follows. Nothing here can make two leaders: the real vote is still
//! openraft's.
//!
//! A leader waiting for its own disk sends no heartbeat: openraft 0.9's core awaits the
//! leader's log flush in its loop. So while a log write of the leader is in progress for
//! longer than a heartbeat period, [`spawn`]'s beacon tells every other voter that it lives
//! ([`ALIVE_PATH`], carrying its vote), which counts as contact — for at most
//! [`WRITE_PATIENCE`] per write, so a disk that hangs is still replaced, that much later than
//! a crash.

use std::time::Duration;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rand::Rng;
use serde_json::json;
use tokio::time::Instant;

use std::sync::Arc;

use crate::group::Group;
use crate::headers::{group_of, GROUP_HEADER};
use crate::http::auth;
use crate::node::SharedNode;

/// Internal route of the pre-vote (cluster secret required).
pub const PREVOTE_PATH: &str = "/internal/leader/prevote";
/// How often the driver looks at the node's state.
const CHECK_EVERY: Duration = Duration::from_millis(25);
/// How long a pre-vote waits for the peers' answers.
const PREVOTE_TIMEOUT: Duration = Duration::from_millis(200);
/// Internal route of the leader's beacon (cluster secret required).
pub const ALIVE_PATH: &str = "/internal/leader/alive";
/// How long one log write of the leader may take while its beacon still says it lives: long
/// enough for the stalls a busy shared disk shows (up to ~1 s and more in the soak), short
/// enough that a hung disk costs seconds, not the cluster.
pub const WRITE_PATIENCE: Duration = Duration::from_secs(2);

/// The timing the driver and the pre-vote share (defined with the node's configuration, which
/// the node is built from).
pub use crate::config::ElectionTiming as Timing;

impl Timing {
    fn draw(&self) -> Duration {
        let (lo, hi) = (
            self.timeout_min.as_millis() as u64,
            self.lease.as_millis() as u64,
        );
        Duration::from_millis(rand::thread_rng().gen_range(lo..hi.max(lo + 1)))
    }
}

/// Starts the election driver of `group` on `node`.
pub fn spawn(node: SharedNode, group: Arc<Group>, timing: Timing) {
    group.raft.runtime_config().elect(false);
    tokio::spawn(beacon(node.clone(), group.clone(), node.config.heartbeat));
    tokio::spawn(drive(node, group, timing));
}

/// The replica a peer's call (`/internal/leader/…`) addresses, once the caller is admitted
/// as a peer of this cluster; its rejection is the answer that refuses the caller.
pub struct PeerGroup(pub Arc<Group>);

impl FromRequestParts<SharedNode> for PeerGroup {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, node: &SharedNode) -> Result<Self, Response> {
        let headers = &parts.headers;
        auth::admit_peer(node, headers).map_err(IntoResponse::into_response)?;
        let group = group_of(headers)
            .ok_or_else(|| (StatusCode::BAD_REQUEST, "undecodable group").into_response())?;
        let replica = node.group(group).ok_or_else(|| {
            let msg = format!("this node hosts no replica of group {group}");
            (StatusCode::NOT_FOUND, msg).into_response()
        })?;
        Ok(PeerGroup(replica))
    }
}

/// Every heartbeat period: if this node leads and its log write in progress has taken longer
/// than that period but less than [`WRITE_PATIENCE`], tells every other voter it lives.
async fn beacon(node: SharedNode, group: Arc<Group>, every: Duration) {
    let me = node.config.node_id;
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if node.is_stopping() {
            return;
        }
        let stalled = group
            .log_writing_for()
            .is_some_and(|w| w >= every && w < WRITE_PATIENCE);
        if !stalled {
            continue;
        }
        let (vote, voters) = {
            let m = group.raft.metrics();
            let m = m.borrow();
            if m.current_leader != Some(me) {
                continue;
            }
            let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
            (m.vote, voters)
        };
        let addrs = other_voter_addrs(&node, &group, &voters);
        metrics::counter!("raftlock_leader_beacons_total").increment(1);
        let sends = addrs.iter().map(|addr| {
            node.peer_request(reqwest::Method::POST, &node.peer_url(addr, ALIVE_PATH))
                .header(GROUP_HEADER, group.id.to_string())
                .timeout(every)
                .json(&vote)
                .send()
        });
        // Best effort: a beacon lost is a heartbeat missed.
        let _ = futures::future::join_all(sends).await;
    }
}

/// `POST /internal/leader/alive`: a leader whose log write keeps its core from sending
/// heartbeats says it lives; counted as contact when it carries at least this node's vote
/// (a deposed leader's does not).
pub async fn answer_alive(PeerGroup(group): PeerGroup, body: axum::body::Bytes) -> Response {
    let Ok(vote) = serde_json::from_slice::<raftlock_raft::Vote>(&body) else {
        return (StatusCode::BAD_REQUEST, "undecodable leader beacon").into_response();
    };
    if raftlock_raft::carries_current_vote(&group.raft, &vote) {
        group.contact.touch();
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn drive(node: SharedNode, group: Arc<Group>, timing: Timing) {
    let started = Instant::now();
    let me = node.config.node_id;
    let my_timeout = timing.draw();
    let mut not_before = started;
    let mut ticker = tokio::time::interval(CHECK_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if node.is_stopping() {
            return;
        }
        if Instant::now() < not_before {
            continue;
        }
        let (leading, voters) = {
            let m = group.raft.metrics();
            let m = m.borrow();
            let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
            (m.current_leader == Some(me), voters)
        };
        if leading || !voters.contains(&me) {
            continue;
        }
        let silence = (group.contact.since()).unwrap_or_else(|| started.elapsed());
        if voters.len() > 1 && silence < timing.lease + my_timeout {
            continue;
        }
        if !group.may_campaign() || granted_recently(&group, timing.lease) {
            continue;
        }
        not_before = Instant::now() + timing.draw();
        let grants = 1 + prevote(&node, &group, &voters).await;
        if 2 * grants <= voters.len() {
            tracing::debug!(
                grants,
                voters = voters.len(),
                "pre-vote failed: not campaigning"
            );
            metrics::counter!("raftlock_prevotes_failed_total").increment(1);
            continue;
        }
        tracing::info!(
            grants,
            voters = voters.len(),
            group = group.id,
            "pre-vote passed: campaigning"
        );
        metrics::counter!("raftlock_elections_started_total").increment(1);
        if let Err(e) = group.raft.trigger().elect().await {
            tracing::warn!(error = %e, "cannot start an election");
        }
    }
}

fn granted_recently(group: &Group, lease: Duration) -> bool {
    group
        .prevote_granted_at
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some_and(|t| t.elapsed() < lease)
}

/// What a candidate presents: its log's last (term, index).
#[derive(serde::Serialize, serde::Deserialize)]
struct PreVote {
    last_log_term: u64,
    last_log_index: u64,
}

/// The addresses of `voters` other than this node, from the membership it knows.
fn other_voter_addrs(node: &SharedNode, group: &Group, voters: &[u64]) -> Vec<String> {
    let me = node.config.node_id;
    let m = group.raft.metrics();
    let m = m.borrow();
    voters
        .iter()
        .filter(|id| **id != me)
        .filter_map(|id| m.membership_config.membership().get_node(id))
        .map(|n| n.addr.clone())
        .collect()
}

/// Asks every other voter; returns how many granted within [`PREVOTE_TIMEOUT`].
async fn prevote(node: &SharedNode, group: &Group, voters: &[u64]) -> usize {
    let (last_log_term, last_log_index) = group.last_log().await;
    let ask_body = PreVote {
        last_log_term,
        last_log_index,
    };
    let addrs = other_voter_addrs(node, group, voters);
    let asks = addrs.iter().map(|addr| ask(node, group, addr, &ask_body));
    futures::future::join_all(asks)
        .await
        .into_iter()
        .filter(|granted| *granted)
        .count()
}

async fn ask(node: &SharedNode, group: &Group, addr: &str, body: &PreVote) -> bool {
    let req = node
        .peer_request(reqwest::Method::POST, &node.peer_url(addr, PREVOTE_PATH))
        .header(GROUP_HEADER, group.id.to_string())
        .timeout(PREVOTE_TIMEOUT)
        .json(body);
    let Ok(resp) = req.send().await else {
        return false;
    };
    if !resp.status().is_success() {
        return false;
    }
    resp.json::<serde_json::Value>()
        .await
        .ok()
        .and_then(|v| v.get("granted").and_then(|g| g.as_bool()))
        .unwrap_or(false)
}

/// `POST /internal/leader/prevote`: granted if this node is not the leader, has not heard
/// from one within the lease (counting from its own start when it never has), and the
/// candidate's log is at least as up to date as its own.
pub async fn answer_prevote(
    State(node): State<SharedNode>,
    PeerGroup(group): PeerGroup,
    body: axum::body::Bytes,
) -> Response {
    let silence = (group.contact.since()).unwrap_or_else(|| node.started.elapsed());
    let Ok(candidate) = serde_json::from_slice::<PreVote>(&body) else {
        return (StatusCode::BAD_REQUEST, "undecodable pre-vote").into_response();
    };
    let granted = !group.is_leader()
        && silence >= node.election_timing.lease
        && (candidate.last_log_term, candidate.last_log_index) >= group.last_log().await;
    if granted {
        *group
            .prevote_granted_at
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }
    Json(json!({ "granted": granted })).into_response()
}
