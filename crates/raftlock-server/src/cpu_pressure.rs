//! Whether this node's CPU quota is what limits it: the share of recent CPU periods in which
//! its cgroup was throttled (a container's `--cpus`, a Kubernetes CPU limit).
//!
//! The proposer batches harder when it is (`crate::proposer`, *lingering*): on a node held to
//! its quota, every log entry's fixed CPU cost is paid out of a budget that caps throughput,
//! and fuller entries leave more of it to the writes; on a node with CPU to spare, waiting
//! for fuller entries only adds latency (measured: 16 clients on unconstrained nodes lost
//! 20–35 % of their acquires/s when the proposer always lingered).
//!
//! Read from the cgroup file system every [`SAMPLE_EVERY`]: `cpu.stat`'s `nr_periods` and
//! `nr_throttled`, of the cgroup `/proc/self/cgroup` names (re-read each time: a process can
//! be moved into a cgroup after it started). cgroup v1 (the `cpu` controller's hierarchy) and
//! v2 (the unified one) at their usual mount point, `/sys/fs/cgroup`. A process without a CPU
//! quota — or where these files cannot be read — is never throttled, so nothing lingers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How often the throttling counters are read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Share of the CPU periods of the last sample in which the cgroup ran out of quota, from
/// which the node counts as held to its quota. A node that only now and then meets its quota
/// (a burst) is not CPU-bound; one throttled in a fifth of its periods is.
pub const THROTTLED_SHARE: f64 = 0.2;

/// Where the cgroup file system is mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Whether the node was held to its CPU quota over the last sample.
#[derive(Debug, Default)]
pub struct CpuPressure {
    held: AtomicBool,
}

impl CpuPressure {
    /// The process's one instance; the first call starts its sampling task on the current
    /// Tokio runtime.
    pub fn shared() -> Arc<CpuPressure> {
        static SHARED: OnceLock<Arc<CpuPressure>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let pressure = Arc::new(CpuPressure::default());
                tokio::spawn(sample(Arc::downgrade(&pressure)));
                pressure
            })
            .clone()
    }

    /// Whether the node's CPU quota held it back in at least [`THROTTLED_SHARE`] of the
    /// periods of the last sample.
    pub fn held_to_quota(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }
}

/// Reads the counters every [`SAMPLE_EVERY`] until `pressure` is dropped.
async fn sample(pressure: std::sync::Weak<CpuPressure>) {
    let mut last = read_counters();
    loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let Some(pressure) = pressure.upgrade() else {
            return;
        };
        let now = read_counters();
        let held = match (last, now) {
            (Some(before), Some(after)) => throttled_share(before, after) >= THROTTLED_SHARE,
            _ => false,
        };
        pressure.held.store(held, Ordering::Relaxed);
        metrics::gauge!("raftlock_cpu_quota_held").set(if held { 1.0 } else { 0.0 });
        last = now;
    }
}

/// `(nr_periods, nr_throttled)` of this process's CPU cgroup, if it has readable ones.
fn read_counters() -> Option<(u64, u64)> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let unified = std::path::Path::new(CGROUP_ROOT)
        .join("cgroup.controllers")
        .exists();
    let cgroup = CpuCgroup::of(&cgroups, unified)?;
    // In a container without a cgroup namespace (Docker on cgroup v1), /proc/self/cgroup
    // names the host's path (`/docker/<id>`) while the container sees its own cgroup at the
    // hierarchy's root: read that when the named one is not there.
    let stat = std::fs::read_to_string(cgroup.stat())
        .ok()
        .or_else(|| std::fs::read_to_string(cgroup.root_stat()?).ok())?;
    counters(&stat)
}

/// The cgroup that holds this process's CPU counters.
#[derive(Debug, PartialEq)]
struct CpuCgroup {
    /// Where its hierarchy is mounted: the v1 `cpu` controller's, or the unified one.
    hierarchy: PathBuf,
    /// Its path inside the hierarchy, without the leading `/` (empty: the root).
    path: String,
}

impl CpuCgroup {
    /// The cgroup that `/proc/self/cgroup` (`cgroups`) names: the v1 `cpu` controller's when
    /// there is one, else the unified hierarchy's (`unified`: `CGROUP_ROOT` is a v2 mount).
    fn of(cgroups: &str, unified: bool) -> Option<CpuCgroup> {
        let mut v2 = None;
        for line in cgroups.lines() {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let at = |hierarchy: PathBuf| CpuCgroup {
                hierarchy,
                path: path.trim_matches('/').to_string(),
            };
            if controllers.split(',').any(|c| c == "cpu") {
                return Some(at(PathBuf::from(CGROUP_ROOT).join(controllers)));
            }
            if controllers.is_empty() && unified {
                v2 = Some(at(PathBuf::from(CGROUP_ROOT)));
            }
        }
        v2
    }

    /// Its `cpu.stat`.
    fn stat(&self) -> PathBuf {
        self.hierarchy.join(&self.path).join("cpu.stat")
    }

    /// The `cpu.stat` at the root of its hierarchy, unless it is the root.
    fn root_stat(&self) -> Option<PathBuf> {
        (!self.path.is_empty()).then(|| self.hierarchy.join("cpu.stat"))
    }
}

/// `(nr_periods, nr_throttled)` from a `cpu.stat`.
fn counters(stat: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((field("nr_periods")?, field("nr_throttled")?))
}

/// The share of the periods between two readings in which the cgroup was throttled (0 when
/// none passed: no quota, or an idle process).
fn throttled_share(before: (u64, u64), after: (u64, u64)) -> f64 {
    let periods = after.0.saturating_sub(before.0);
    let throttled = after.1.saturating_sub(before.1);
    if periods == 0 {
        0.0
    } else {
        throttled as f64 / periods as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_of(cgroups: &str, unified: bool) -> Option<PathBuf> {
        CpuCgroup::of(cgroups, unified).map(|c| c.stat())
    }

    #[test]
    fn the_cpu_controllers_cgroup_is_found_in_v1_and_v2_layouts() {
        let v1 = "4:memory:/x\n2:cpu,cpuacct:/raftlock-ab-this-1\n0::/\n";
        assert_eq!(
            stat_of(v1, false),
            Some(PathBuf::from(
                "/sys/fs/cgroup/cpu,cpuacct/raftlock-ab-this-1/cpu.stat"
            ))
        );
        let v1_root = "1:cpu:/\n0::/\n";
        assert_eq!(
            stat_of(v1_root, false),
            Some(PathBuf::from("/sys/fs/cgroup/cpu/cpu.stat"))
        );
        let v2 = "0::/kubepods/pod1/c1\n";
        assert_eq!(
            stat_of(v2, true),
            Some(PathBuf::from("/sys/fs/cgroup/kubepods/pod1/c1/cpu.stat"))
        );
        assert_eq!(stat_of(v2, false), None, "no v2 mount, no cpu hierarchy");
    }

    #[test]
    fn a_container_without_a_cgroup_namespace_reads_its_hierarchys_root() {
        let docker_v1 = "2:cpu,cpuacct:/docker/abc\n1:memory:/docker/abc\n";
        assert_eq!(
            CpuCgroup::of(docker_v1, false).unwrap().root_stat(),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/cpu.stat"))
        );
        let at_root = "2:cpu,cpuacct:/\n";
        assert_eq!(
            CpuCgroup::of(at_root, false).unwrap().root_stat(),
            None,
            "already the root"
        );
    }

    #[test]
    fn throttling_is_read_from_cpu_stat_as_a_share_of_periods() {
        let stat = "nr_periods 1200\nnr_throttled 300\nthrottled_time 5\nnr_bursts 0\n";
        assert_eq!(counters(stat), Some((1200, 300)));
        // cgroup v2 lists usage first.
        let v2 = "usage_usec 10\nuser_usec 5\nsystem_usec 5\nnr_periods 7\nnr_throttled 1\nthrottled_usec 2\n";
        assert_eq!(counters(v2), Some((7, 1)));
        assert_eq!(counters("usage_usec 10\n"), None);
        assert_eq!(throttled_share((1000, 100), (1100, 190)), 0.9);
        assert_eq!(throttled_share((5, 0), (5, 0)), 0.0, "no periods: no quota");
    }
}
