//! `stall`: latency of a steady read/acquire load on a cluster holding many locks, while the
//! leader builds snapshots (building a snapshot must not stall the node).
//!
//! Each client loops: read a held lock (`mem-*`, loaded by `load`), then acquire and release
//! a lock of its own. The leader's `raftlock_snapshot_duration_seconds_count` is read before
//! and after, so the report says how many snapshots were built during the measurement.

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};

use crate::systems::{rl_lease, rl_read, rl_release, scrape, series_sum, Target};

/// What one run measured.
pub struct Stall {
    pub ops: usize,
    pub errors: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub snapshots: f64,
    pub mean_snapshot_s: f64,
}

async fn snapshot_metrics(target: &Target) -> (f64, f64) {
    let texts = scrape(std::slice::from_ref(&target.leader)).await;
    (
        series_sum(&texts, "raftlock_snapshot_duration_seconds_count"),
        series_sum(&texts, "raftlock_snapshot_duration_seconds_sum"),
    )
}

/// Runs `clients` loops for `seconds` over `held` loaded locks.
pub async fn run(
    target: &Target,
    clients: usize,
    held: usize,
    seconds: f64,
) -> anyhow::Result<Stall> {
    let (count_before, sum_before) = snapshot_metrics(target).await;
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let per_client = target
        .lock_clients(clients, |i, mut c, token| async move {
            let own = format!("stall-{i}");
            let (mut lat, mut errors) = (Vec::new(), 0usize);
            let mut n = i;
            while Instant::now() < until {
                n = (n * 7919 + 13) % held.max(1);
                let t = Instant::now();
                let read = rl_read(&mut c, &format!("mem-{n}")).await;
                lat.push(t.elapsed());
                let t = Instant::now();
                let acquired = rl_lease(&mut c, Method::POST, &own, &token, 30).await;
                lat.push(t.elapsed());
                let t = Instant::now();
                let released = rl_release(&mut c, &own, &token).await;
                lat.push(t.elapsed());
                let ok = matches!(read, Ok(StatusCode::OK))
                    && matches!(acquired, Ok(StatusCode::OK))
                    && matches!(released, Ok(StatusCode::NO_CONTENT));
                errors += usize::from(!ok);
            }
            anyhow::Ok((lat, errors))
        })
        .await?;
    let (mut all, mut errors) = (Vec::new(), 0);
    for (lat, e) in per_client {
        all.extend(lat);
        errors += e;
    }
    let (count_after, sum_after) = snapshot_metrics(target).await;
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let snapshots = count_after - count_before;
    Ok(Stall {
        ops: all.len(),
        errors,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: all.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        snapshots,
        mean_snapshot_s: if snapshots > 0.0 {
            (sum_after - sum_before) / snapshots
        } else {
            0.0
        },
    })
}
