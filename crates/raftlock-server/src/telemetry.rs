//! Logs (tracing, text or JSON, each request's id on its lines) and Prometheus metrics.

use std::sync::OnceLock;

use axum::http::Request;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::Span;
use tracing_subscriber::EnvFilter;

use crate::headers::REQUEST_ID_HEADER;
use crate::node::Node;

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the global tracing subscriber.
pub fn init_logs(format: &str, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every series a node exports, with its `# HELP` text: the one list the dashboard, the
/// alert rules and the docs are checked against (`tests/tests/ops.rs`).
pub const CATALOG: &[(&str, Kind, &str)] = &[
    (
        "raftlock_http_requests_total",
        Kind::Counter,
        "HTTP requests answered, by route, method and status.",
    ),
    (
        "raftlock_http_request_duration_seconds",
        Kind::Histogram,
        "Time to answer an HTTP request.",
    ),
    (
        "raftlock_http_connections",
        Kind::Gauge,
        "Open HTTP connections on this node's listeners.",
    ),
    (
        "raftlock_connections_refused_total",
        Kind::Counter,
        "Client requests refused on a connection of the peers' reserve (past --max-connections), by reason.",
    ),
    (
        "raftlock_slow_bodies_shed_total",
        Kind::Counter,
        "Requests answered 408 because their body did not arrive within 10 s of their head.",
    ),
    (
        "raftlock_rate_limited_total",
        Kind::Counter,
        "Requests refused by a project's rate limit, by API.",
    ),
    (
        "raftlock_forwarded_total",
        Kind::Counter,
        "Requests this follower forwarded to the leader and got an answer for.",
    ),
    (
        "raftlock_forward_duration_seconds",
        Kind::Histogram,
        "Round trip of one forward to the leader.",
    ),
    (
        "raftlock_forward_failures_total",
        Kind::Counter,
        "Forward attempts that got no answer from the leader.",
    ),
    (
        "raftlock_forward_retries_total",
        Kind::Counter,
        "Forwards sent again to a new leader within the request's deadline.",
    ),
    (
        "raftlock_proposals_total",
        Kind::Counter,
        "Log entries proposed by this node, by outcome (committed, failed).",
    ),
    (
        "raftlock_proposal_batch_ops",
        Kind::Histogram,
        "Operations per proposed log entry (group commit).",
    ),
    (
        "raftlock_cpu_quota_held",
        Kind::Gauge,
        "1 while this node's cgroup CPU quota throttles it in a fifth or more of its periods (the proposer then lingers for fuller entries), else 0.",
    ),
    (
        "raftlock_proposal_commit_seconds",
        Kind::Histogram,
        "Time from proposing a log entry to its commit and apply.",
    ),
    ("raftlock_raft_term", Kind::Gauge, "Current Raft term (of the meta group)."),
    (
        "raftlock_shard_term",
        Kind::Gauge,
        "Current Raft term of each group this node hosts (label shard: 0 is the meta group).",
    ),
    (
        "raftlock_shard_is_leader",
        Kind::Gauge,
        "1 for each group this node leads, 0 for each other group it hosts (label shard).",
    ),
    (
        "raftlock_shard_applied_index",
        Kind::Gauge,
        "Applied log index of each group this node hosts (label shard).",
    ),
    (
        "raftlock_shard_project_locks",
        Kind::Gauge,
        "Project locks held in each group this node hosts (label shard).",
    ),
    (
        "raftlock_shard_hierarchical_locks_held",
        Kind::Gauge,
        "Hierarchical locks held in each group this node hosts (label shard).",
    ),
    (
        "raftlock_leaderships_balanced_total",
        Kind::Counter,
        "Leaderships this node handed over to even out how many groups each node leads.",
    ),
    (
        "raftlock_raft_leader",
        Kind::Gauge,
        "Id of the leader this node knows, -1 for none.",
    ),
    (
        "raftlock_raft_is_leader",
        Kind::Gauge,
        "1 while this node leads.",
    ),
    (
        "raftlock_raft_last_log_index",
        Kind::Gauge,
        "Index of the last entry in this node's log.",
    ),
    (
        "raftlock_raft_commit_index",
        Kind::Gauge,
        "Highest index known committed.",
    ),
    (
        "raftlock_raft_applied_index",
        Kind::Gauge,
        "Highest index applied to the state machine.",
    ),
    (
        "raftlock_apply_lag_entries",
        Kind::Gauge,
        "Committed entries not yet applied here (commit - applied).",
    ),
    (
        "raftlock_leader_changes_total",
        Kind::Counter,
        "Leader changes this node has seen (including to no leader).",
    ),
    (
        "raftlock_elections_started_total",
        Kind::Counter,
        "Elections this node started after a granted pre-vote.",
    ),
    (
        "raftlock_prevotes_failed_total",
        Kind::Counter,
        "Pre-votes this node asked for and did not get.",
    ),
    (
        "raftlock_leader_beacons_total",
        Kind::Counter,
        "Beacons this leader sent to say it lives while its log write kept its core from sending heartbeats.",
    ),
    (
        "raftlock_leader_handoffs_total",
        Kind::Counter,
        "Leadership hand-offs this node made (stop or operator request).",
    ),
    (
        "raftlock_peer_rpc_errors_total",
        Kind::Counter,
        "Raft RPCs to a peer that failed in transport, by RPC.",
    ),
    (
        "raftlock_peer_refused_total",
        Kind::Counter,
        "Node-to-node requests refused (wrong secret or cluster id), by reason.",
    ),
    (
        "raftlock_peer_streams_opened_total",
        Kind::Counter,
        "Peer streams (kept-open Raft RPC connections) this node opened; grows while the pool fills, then only when a link breaks or a stream idles out or ages.",
    ),
    (
        "raftlock_peer_streams",
        Kind::Gauge,
        "Peer streams this node is serving.",
    ),
    (
        "raftlock_wal_fsync_duration_seconds",
        Kind::Histogram,
        "Time to write and fdatasync one batch of log entries.",
    ),
    (
        "raftlock_apply_duration_seconds",
        Kind::Histogram,
        "Time to apply one batch of committed entries; the state is write-locked meanwhile, so linearizable reads wait as long.",
    ),
    (
        "raftlock_proposer_queue_wait_seconds",
        Kind::Histogram,
        "How long the oldest write of each proposed batch waited in the proposer's queue (behind the batches in flight).",
    ),
    (
        "raftlock_log_purge_duration_seconds",
        Kind::Histogram,
        "Time openraft's core loop spends purging the log up to a snapshot: memory only (the purge record rides in the next log write).",
    ),
    (
        "raftlock_wal_segment_removal_duration_seconds",
        Kind::Histogram,
        "Time to delete WAL segments a purge freed, on the wal-janitor thread, off the write path: each renamed out of the log (directory synced), then freed 1 MiB per 10 ms so the device never gets one large discard (~0.2 s per 16 MiB segment by design).",
    ),
    (
        "raftlock_wal_bytes_total",
        Kind::Counter,
        "Bytes written to the write-ahead log.",
    ),
    (
        "raftlock_log_entries_read_from_disk_total",
        Kind::Counter,
        "Log entries returned by reads that reached back past the decoded tail (the newest 8,192 ops, for 1-2 s) and so went to the WAL on disk: a follower catching up. Growing while every member is up means replication falls behind by more than the tail.",
    ),
    (
        "raftlock_startup_seconds",
        Kind::Gauge,
        "How long each phase of this process's start took (label phase: wal_replay, snapshot_restore and raft_start per group; ready, from the start until the node was a member knowing its leader, on shard 0).",
    ),
    (
        "raftlock_snapshot_duration_seconds",
        Kind::Histogram,
        "Time to write a snapshot file durably.",
    ),
    (
        "raftlock_snapshot_copy_seconds",
        Kind::Histogram,
        "Time the state lock is held to copy the state for a snapshot.",
    ),
    (
        "raftlock_snapshot_bytes",
        Kind::Gauge,
        "Size of the last snapshot written.",
    ),
    (
        "raftlock_snapshots_by_size_total",
        Kind::Counter,
        "Snapshots asked for because the log grew past --snapshot-bytes.",
    ),
    (
        "raftlock_snapshots_by_replay_total",
        Kind::Counter,
        "Snapshots built because applying the log since the last one took --snapshot-replay-ms (what a restart would spend replaying it).",
    ),
    (
        "raftlock_clock_offset_seconds",
        Kind::Gauge,
        "This node's wall clock minus cluster time.",
    ),
    (
        "raftlock_project_locks",
        Kind::Gauge,
        "Project locks stored (live or within the takeover grace).",
    ),
    (
        "raftlock_namespaces",
        Kind::Gauge,
        "Hierarchical-lock namespaces.",
    ),
    (
        "raftlock_lock_leases",
        Kind::Gauge,
        "Hierarchical-lock leases.",
    ),
    (
        "raftlock_hierarchical_locks_held",
        Kind::Gauge,
        "Hierarchical locks with at least one holder.",
    ),
    (
        "raftlock_queued_waiters",
        Kind::Gauge,
        "Blocking acquires (locks and semaphores) queued in the replicated state.",
    ),
    ("raftlock_semaphores", Kind::Gauge, "Semaphores."),
    (
        "raftlock_semaphore_holds",
        Kind::Gauge,
        "Semaphore holds (one per lease and semaphore).",
    ),
    ("raftlock_wait_groups", Kind::Gauge, "Wait groups."),
    ("raftlock_barriers", Kind::Gauge, "Barriers."),
    (
        "raftlock_waiters",
        Kind::Gauge,
        "Blocking acquire calls waiting on this node.",
    ),
    (
        "raftlock_heap_live_bytes",
        Kind::Gauge,
        "Bytes this process holds from its allocator (requested sizes; without what the allocator keeps after frees).",
    ),
    (
        "raftlock_resident_bytes",
        Kind::Gauge,
        "Resident memory of this process (RSS): what it holds plus what its allocator keeps.",
    ),
    (
        "raftlock_tls_handshake_failures_total",
        Kind::Counter,
        "TLS handshakes refused or failed on this node's listeners.",
    ),
    (
        "raftlock_tls_reloads_total",
        Kind::Counter,
        "Certificate files reloaded after a change or SIGHUP.",
    ),
    (
        "raftlock_tls_reload_failures_total",
        Kind::Counter,
        "Certificate reloads that failed (the previous certificate stays).",
    ),
];

/// Installs the Prometheus recorder (once per process) and describes every series.
pub fn init_metrics() {
    PROMETHEUS.get_or_init(|| {
        let buckets = [
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ];
        let handle = PrometheusBuilder::new()
            .set_buckets(&buckets)
            .expect("valid buckets")
            // Batch sizes are counts, not seconds.
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full("raftlock_proposal_batch_ops".into()),
                &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0],
            )
            .expect("valid buckets")
            .install_recorder()
            .expect("metrics recorder installs once");
        for (name, kind, help) in CATALOG {
            match kind {
                Kind::Counter => metrics::describe_counter!(*name, *help),
                Kind::Gauge => metrics::describe_gauge!(*name, *help),
                Kind::Histogram => metrics::describe_histogram!(*name, *help),
            }
        }
        register_all();
        spawn_upkeep(handle.clone());
        handle
    });
}

/// How often the recorder's histograms are drained into their buckets between scrapes.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Drains the recorder's histograms every [`UPKEEP_EVERY`] on a thread of its own.
/// `install_recorder` keeps every histogram sample in memory until something renders
/// `/metrics` (its docs leave the upkeep to the caller): a node nobody scrapes — or scrapes
/// once a minute — holds each request's samples that long, several per request.
fn spawn_upkeep(handle: PrometheusHandle) {
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_EVERY);
            handle.run_upkeep();
        })
        .expect("spawn the metrics upkeep thread");
}

/// Label values of series that carry labels, so they exist (at zero) from the start.
const LABELLED: &[(&str, &str, &[&str])] = &[
    (
        "raftlock_proposals_total",
        "outcome",
        &["committed", "failed"],
    ),
    (
        "raftlock_peer_rpc_errors_total",
        "rpc",
        &["append", "vote", "snapshot"],
    ),
    (
        "raftlock_rate_limited_total",
        "api",
        &["locks", "hierarchy"],
    ),
    ("raftlock_peer_refused_total", "reason", &["cluster_id"]),
    (
        "raftlock_connections_refused_total",
        "reason",
        &["max_connections"],
    ),
];

/// Registers every catalogued series, so `/metrics` lists each one from the start (a counter
/// that is still 0 is an answer, an absent series is a question) — except the per-route HTTP
/// series, which appear with the first request on each route.
fn register_all() {
    for (name, kind, _) in CATALOG {
        if name.starts_with("raftlock_http_request") {
            continue;
        }
        match LABELLED.iter().find(|(n, _, _)| n == name) {
            Some((_, label, values)) => {
                for value in *values {
                    metrics::counter!(*name, *label => *value).increment(0);
                }
            }
            None => match kind {
                Kind::Counter => metrics::counter!(*name).increment(0),
                Kind::Gauge => metrics::gauge!(*name).increment(0.0),
                Kind::Histogram => {
                    let _ = metrics::histogram!(*name);
                }
            },
        }
    }
}

/// Counts leader changes as this node sees them (every change of the known leader,
/// including to none), from Raft's metrics.
pub fn spawn_leader_watch(raft: raftlock_raft::Raft) {
    tokio::spawn(async move {
        let mut rx = raft.metrics();
        let mut leader = rx.borrow().current_leader;
        while rx.changed().await.is_ok() {
            let now = rx.borrow().current_leader;
            if now != leader {
                metrics::counter!("raftlock_leader_changes_total").increment(1);
                leader = now;
            }
        }
    });
}

pub fn render_metrics() -> String {
    PROMETHEUS.get().map(|h| h.render()).unwrap_or_default()
}

/// The `method` label of the HTTP metrics: one of a fixed set, so a client that sends
/// made-up methods (any token is a valid HTTP method) cannot create a series per request —
/// 1,000 requests with 8 KB method names grew `/metrics` by 7.9 MiB when the label was the
/// method as sent.
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Whether an answer is the client's doing rather than a failure of this server: any 4xx,
/// `501` (a method the API does not have) and `503` (no leader, no quorum: the documented
/// answer of a cluster in transition, which the client retries). A client can make as many of
/// these as it likes, so they are never logged at ERROR, and only within [`CLIENT_LOG`].
pub fn client_side(status: axum::http::StatusCode) -> bool {
    status.is_client_error() || matches!(status.as_u16(), 501 | 503)
}

/// Lines a second logged for answers that are the client's doing ([`client_side`]); past it
/// they are only counted, and the next line logged says how many were left out.
pub const CLIENT_LINES_PER_SECOND: u32 = 20;

/// A budget of log lines per second, shared by every request of the node.
#[derive(Debug)]
pub struct LogBudget {
    per_second: u32,
    /// (the second of the window, lines logged in it, lines left out since the last logged).
    state: std::sync::Mutex<(u64, u32, u64)>,
}

impl LogBudget {
    pub const fn new(per_second: u32) -> Self {
        LogBudget {
            per_second,
            state: std::sync::Mutex::new((0, 0, 0)),
        }
    }

    /// At second `now`: `Some(n)` when a line may be logged (`n` lines were left out since
    /// the last one), `None` when the second's budget is spent (the line is counted instead).
    pub fn take(&self, now: u64) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (second, used, left_out) = &mut *state;
        if *second != now {
            (*second, *used) = (now, 0);
        }
        if *used >= self.per_second {
            *left_out += 1;
            return None;
        }
        *used += 1;
        Some(std::mem::take(left_out))
    }
}

/// The log budget of client-side answers ([`client_side`]).
pub static CLIENT_LOG: LogBudget = LogBudget::new(CLIENT_LINES_PER_SECOND);

fn unix_second() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Logs each answer at DEBUG; answers that are the client's doing ([`client_side`]: 4xx,
/// 501, 503) within [`CLIENT_LOG`], so a client sending bad requests (made-up methods, no
/// credentials, no leader to be had) cannot flood the log even with DEBUG on.
/// `raftlock_http_requests_total` counts every answer by status.
pub fn on_response<B>(resp: &axum::http::Response<B>, latency: std::time::Duration, _span: &Span) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let status = resp.status().as_u16();
    if !client_side(resp.status()) {
        tracing::debug!(status, ?latency, "request answered");
        return;
    }
    if let Some(left_out) = CLIENT_LOG.take(unix_second()) {
        if left_out > 0 {
            tracing::debug!(
                status,
                ?latency,
                left_out,
                "request refused (and {left_out} more not logged)"
            );
        } else {
            tracing::debug!(status, ?latency, "request refused");
        }
    }
}

/// Logs a server failure at ERROR: a 5xx that is not the client's doing ([`client_side`]:
/// `501` and `503` are answered to clients and logged by [`on_response`]), or a failed
/// response body.
pub fn on_server_error(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: std::time::Duration,
    _span: &Span,
) {
    use tower_http::classify::ServerErrorsFailureClass;
    let expected = matches!(class, ServerErrorsFailureClass::StatusCode(code) if client_side(code));
    if !expected {
        tracing::error!(classification = %class, ?latency, "request failed");
    }
}

/// Longest path a log line carries (the rest is cut): the path is the client's to choose.
const LOGGED_PATH: usize = 256;

/// The span of one HTTP request; its request id appears on every line logged inside it. The
/// method is logged as its metrics label ([`method_label`]) and the path cut at
/// [`LOGGED_PATH`] bytes: a client cannot make the node write kilobytes per line.
pub fn request_span<B>(req: &Request<B>) -> Span {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let id = truncated(id, 64);
    let method = method_label(req.method());
    let path = truncated(req.uri().path(), LOGGED_PATH);
    tracing::info_span!("request", method, path, request_id = id)
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Updates the gauges that describe Raft and the state machine.
pub fn refresh_gauges(node: &Node) {
    refresh_memory_gauges();
    let m = node.meta.raft.metrics().borrow().clone();
    metrics::gauge!("raftlock_raft_term").set(m.current_term as f64);
    metrics::gauge!("raftlock_raft_leader").set(m.current_leader.map(|l| l as f64).unwrap_or(-1.0));
    metrics::gauge!("raftlock_raft_is_leader").set(
        if m.current_leader == Some(node.config.node_id) {
            1.0
        } else {
            0.0
        },
    );
    metrics::gauge!("raftlock_raft_last_log_index").set(m.last_log_index.unwrap_or(0) as f64);
    let commit = crate::http::admin::commit_index(&m, node.config.node_id).unwrap_or(0);
    let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
    metrics::gauge!("raftlock_raft_commit_index").set(commit as f64);
    metrics::gauge!("raftlock_raft_applied_index").set(applied as f64);
    metrics::gauge!("raftlock_apply_lag_entries").set(commit.saturating_sub(applied) as f64);
    let mut totals = StateTotals::default();
    for group in node.groups() {
        let shard = group.id.to_string();
        let m = group.raft.metrics().borrow().clone();
        let leads = m.current_leader == Some(node.config.node_id);
        metrics::gauge!("raftlock_shard_term", "shard" => shard.clone()).set(m.current_term as f64);
        metrics::gauge!("raftlock_shard_is_leader", "shard" => shard.clone()).set(if leads {
            1.0
        } else {
            0.0
        });
        let applied = m.last_applied.map_or(0, |l| l.index);
        metrics::gauge!("raftlock_shard_applied_index", "shard" => shard.clone())
            .set(applied as f64);
        let held = group.read_local(|sm, _| StateTotals::of(sm));
        metrics::gauge!("raftlock_shard_project_locks", "shard" => shard.clone())
            .set(held.project_locks as f64);
        metrics::gauge!("raftlock_shard_hierarchical_locks_held", "shard" => shard)
            .set(held.held as f64);
        totals.add(&held);
    }
    // Unlabelled: what this node holds over every group it hosts.
    metrics::gauge!("raftlock_semaphores").set(totals.semaphores as f64);
    metrics::gauge!("raftlock_semaphore_holds").set(totals.semaphore_holds as f64);
    metrics::gauge!("raftlock_wait_groups").set(totals.wait_groups as f64);
    metrics::gauge!("raftlock_barriers").set(totals.barriers as f64);
    metrics::gauge!("raftlock_project_locks").set(totals.project_locks as f64);
    metrics::gauge!("raftlock_namespaces").set(totals.namespaces as f64);
    metrics::gauge!("raftlock_lock_leases").set(totals.leases as f64);
    metrics::gauge!("raftlock_hierarchical_locks_held").set(totals.held as f64);
    metrics::gauge!("raftlock_queued_waiters").set(totals.queued as f64);
}

/// What one group's state holds, for the gauges.
#[derive(Debug, Default)]
struct StateTotals {
    project_locks: usize,
    namespaces: usize,
    leases: usize,
    held: usize,
    queued: usize,
    semaphores: usize,
    semaphore_holds: usize,
    wait_groups: usize,
    barriers: usize,
}

impl StateTotals {
    fn of(sm: &raftlock_core::StateMachine) -> StateTotals {
        let h = sm.hierarchy();
        let (namespaces, leases, held) = h.totals();
        let (semaphores, _, semaphore_holds, semaphore_waiters) = sm.semaphore_totals();
        let (wait_groups, _, barriers, _) = sm.coordination_totals();
        StateTotals {
            project_locks: sm.project_lock_count(),
            namespaces,
            leases,
            held,
            queued: h.waiter_count() + semaphore_waiters,
            semaphores,
            semaphore_holds,
            wait_groups,
            barriers,
        }
    }

    fn add(&mut self, other: &StateTotals) {
        self.project_locks += other.project_locks;
        self.namespaces += other.namespaces;
        self.leases += other.leases;
        self.held += other.held;
        self.queued += other.queued;
        self.semaphores += other.semaphores;
        self.semaphore_holds += other.semaphore_holds;
        self.wait_groups += other.wait_groups;
        self.barriers += other.barriers;
    }
}

/// Memory: what the program holds ([`crate::heap::live_bytes`]) and what the process has
/// resident. A gap that grows while the first stays flat is the allocator's, not a leak.
fn refresh_memory_gauges() {
    metrics::gauge!("raftlock_heap_live_bytes").set(crate::heap::live_bytes() as f64);
    if let Some(rss) = resident_bytes() {
        metrics::gauge!("raftlock_resident_bytes").set(rss as f64);
    }
}

/// RSS from `/proc/self/statm` (its second field, in pages); `None` off Linux.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_method_label_is_one_of_a_fixed_set() {
        use axum::http::Method;
        assert_eq!(method_label(&Method::POST), "POST");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        let made_up = Method::from_bytes(&[b'X'; 8192]).unwrap();
        assert_eq!(method_label(&made_up), "other");
        assert_eq!(method_label(&Method::CONNECT), "other");
        for m in ["GET", "PUT", "DELETE", "HEAD", "OPTIONS"] {
            assert_eq!(method_label(&Method::from_bytes(m.as_bytes()).unwrap()), m);
        }
        // Lower case is another method (methods are case-sensitive).
        assert_eq!(method_label(&Method::from_bytes(b"get").unwrap()), "other");
    }

    #[test]
    fn client_side_answers_are_4xx_501_and_503() {
        use axum::http::StatusCode;
        for code in [400, 401, 404, 405, 408, 409, 413, 429, 501, 503] {
            assert!(client_side(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [200, 204, 500, 502, 504] {
            assert!(!client_side(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }

    #[test]
    fn the_log_budget_counts_what_it_leaves_out() {
        let budget = LogBudget::new(3);
        let first: Vec<_> = (0..5).map(|_| budget.take(100)).collect();
        assert_eq!(first, [Some(0), Some(0), Some(0), None, None]);
        // A new second: the first line says how many were left out.
        assert_eq!(budget.take(101), Some(2));
        assert_eq!(budget.take(101), Some(0));
    }

    #[test]
    fn logged_text_is_cut_at_a_character_boundary() {
        assert_eq!(truncated("abc", 5), "abc");
        assert_eq!(truncated("abcdef", 3), "abc");
        assert_eq!(truncated("aé", 2), "a");
        assert_eq!(truncated(&"x".repeat(9000), LOGGED_PATH).len(), LOGGED_PATH);
    }
}
