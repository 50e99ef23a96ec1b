//! Logs (tracing, text or JSON, each request's id on its lines) and Prometheus metrics.

use std::sync::OnceLock;

use axum::http::Request;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::Span;
use tracing_subscriber::EnvFilter;

use crate::http::REQUEST_ID_HEADER;
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

/// Installs the Prometheus recorder (once per process).
pub fn init_metrics() {
    PROMETHEUS.get_or_init(|| {
        let buckets = [
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ];
        PrometheusBuilder::new()
            .set_buckets(&buckets)
            .expect("valid buckets")
            .install_recorder()
            .expect("metrics recorder installs once")
    });
}

pub fn render_metrics() -> String {
    PROMETHEUS.get().map(|h| h.render()).unwrap_or_default()
}

/// The span of one HTTP request; its request id appears on every line logged inside it.
pub fn request_span<B>(req: &Request<B>) -> Span {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
}

/// Updates the gauges that describe Raft and the state machine.
pub fn refresh_gauges(node: &Node) {
    let m = node.raft.metrics().borrow().clone();
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
    metrics::gauge!("raftlock_raft_commit_index")
        .set(crate::http::admin::commit_index(&m, node.config.node_id).unwrap_or(0) as f64);
    metrics::gauge!("raftlock_raft_applied_index")
        .set(m.last_applied.map(|l| l.index).unwrap_or(0) as f64);
    let (locks, (namespaces, leases, held), queued) = node.read_local(|sm, _| {
        let h = sm.hierarchy();
        (sm.project_lock_count(), h.totals(), h.waiter_count())
    });
    metrics::gauge!("raftlock_project_locks").set(locks as f64);
    metrics::gauge!("raftlock_namespaces").set(namespaces as f64);
    metrics::gauge!("raftlock_lock_leases").set(leases as f64);
    metrics::gauge!("raftlock_hierarchical_locks_held").set(held as f64);
    metrics::gauge!("raftlock_queued_waiters").set(queued as f64);
}
