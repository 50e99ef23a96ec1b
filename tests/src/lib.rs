//! # raftlock-tests
//!
//! Test support for suites that start real `raftlock serve` processes on free loopback
//! ports: [`Cluster`] starts, kills, restarts and inspects nodes; helpers wait on conditions
//! (never on fixed sleeps) with explicit deadlines.
//!
//! ## Layout
//! - `src/lib.rs`: the harness.
//! - `src/proxy.rs`: a per-link fault proxy for node-to-node traffic
//!   ([`Cluster::start_behind_proxy`]).
//! - `src/disk_probe.rs`: a synced-write witness of the disk's own stalls under a timed test.
//! - `src/linearizability.rs`: a WGL linearizability checker and the project-lock register model.
//! - `src/chaos/`: the chaos suite — workers, fault plan and driver, history checkers.
//! - `tests/*.rs`: one suite per concern (project locks, hierarchical locks, failover,
//!   availability, auth, validation, rate limit, membership, durability, clock, TLS, backup,
//!   console, OpenAPI, `raftlock dev`, the compose deployment, ...).
//! - `python/`: the Python side of the OpenAPI tests (pinned tools, the generated-client
//!   program).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

pub mod chaos;
pub mod disk_probe;
pub mod linearizability;
pub mod proxy;

/// Path of the `raftlock` binary: `$RAFTLOCK_BIN`, else `target/debug/raftlock` next to the
/// test executable.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("RAFTLOCK_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/debug");
    dir.join("raftlock")
}

/// Path of the optimised `raftlock` binary: `$RAFTLOCK_RELEASE_BIN`, else
/// `target/release/raftlock` beside the debug one. For the tests that measure what a node
/// costs (memory with a budget full): a debug build's futures and buffers are about twice a
/// release build's (a pending blocking wait: ~85 KB against ~45 KB of heap), so a bound
/// written for the shipped binary is measured on it. `make integration` builds it.
pub fn release_binary() -> Result<PathBuf> {
    let path = match std::env::var("RAFTLOCK_RELEASE_BIN") {
        Ok(p) => PathBuf::from(p),
        Err(_) => {
            let debug = binary();
            let target = debug.parent().and_then(|d| d.parent()).context("target/")?;
            target.join("release").join("raftlock")
        }
    };
    anyhow::ensure!(
        path.exists(),
        "{} is missing: `cargo build --release --bin raftlock` (make integration does)",
        path.display()
    );
    Ok(path)
}

/// The test machine's one true clock: seconds since the Unix epoch (test processes are never
/// skewed).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// An RFC 3339 time (as in `expires_at`) in nanoseconds since the Unix epoch.
pub fn rfc3339_ns(s: &str) -> Option<i128> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    Some(t.unix_timestamp_nanos())
}

/// libfaketime as Debian installs it (`apt-get install faketime`).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A wall-clock skew for a real process, applied from outside with libfaketime: the offset
/// lives in a file the process re-reads on every clock call, so it can be changed (a clock
/// step) while the process runs. Monotonic clocks are left alone.
pub struct Skew {
    file: PathBuf,
}

impl Skew {
    /// A skew of `ms` milliseconds, kept in `file`. Fails when libfaketime is not installed,
    /// so a test can never pass on an unskewed process by accident.
    pub fn new(file: PathBuf, ms: i64) -> Result<Skew> {
        if !std::path::Path::new(LIBFAKETIME).exists() {
            bail!("{LIBFAKETIME} missing: apt-get install faketime (.ci/run installs it)");
        }
        let skew = Skew { file };
        skew.set(ms)?;
        Ok(skew)
    }

    /// Changes the offset (takes effect at the process's next clock read).
    pub fn set(&self, ms: i64) -> Result<()> {
        let sign = if ms < 0 { '-' } else { '+' };
        let text = format!("{sign}{}.{:03}\n", ms.abs() / 1000, ms.abs() % 1000);
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.file)?;
        Ok(())
    }

    /// The environment that runs a process on this skew.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", LIBFAKETIME.to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// A free TCP port on 127.0.0.1 for a node to listen on, never handed out twice by this
/// process, and below the kernel's ephemeral range. Binding port 0 and releasing it (what
/// this did before) hands out a port from that range, which the kernel may give at once to
/// another socket — a test's proxy binding port 0 or any connection's source port — before
/// the node binds it, and the node exits at start. That fits the set-up failures seen in CI
/// (a node that never answered while "no leader all running nodes agree on"; not reproduced
/// locally). Here the OS never picks these ports on its own, and this process's tests (run
/// on two threads) never share one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    let below = ephemeral_range_start().max(FIRST + 1_000);
    let span = below - FIRST;
    // Where this process starts in the range: test binaries started one after another do
    // not walk the same ports (a killed node's socket may linger).
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{below}");
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`; 32768 if unread).
fn ephemeral_range_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Whether `tool` runs (`tool --version`): tests that need a tool the machine lacks skip.
pub fn installed(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

/// Polls `check` until it yields `Some`, or fails after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct NodeProc {
    addr: String,
    /// Its peer listener (`--peer-listen`), when it has one apart from `addr`.
    peer_addr: Option<String>,
    data_dir: PathBuf,
    child: Option<Child>,
}

impl NodeProc {
    /// Where other nodes reach it.
    fn peer_addr(&self) -> &str {
        self.peer_addr.as_deref().unwrap_or(&self.addr)
    }
}

/// How many times [`Cluster`] set-up starts the nodes when one finds its port taken.
const LAUNCH_ATTEMPTS: u32 = 3;
/// What a node's log says when it cannot bind its port (`EADDRINUSE`).
const PORT_TAKEN: &str = "Address already in use";

/// Runs before a node's first start: `(node id, its data directory, the --peers value)`.
pub type Prepare<'a> = dyn Fn(u64, &std::path::Path, &str) -> Result<()> + 'a;

/// How a test cluster is started; the default is plain HTTP with nothing in between.
#[derive(Default)]
struct LaunchSpec<'a> {
    /// Extra `serve` flags for every node.
    extra: &'a [&'a str],
    /// Peers reach each other through a [`proxy::FaultProxy`] (and the binary is pinned).
    behind_proxy: bool,
    /// Every node has its own `--peer-listen` address for node-to-node traffic.
    peer_listeners: bool,
    /// A command that runs a node's `raftlock` (e.g. a syscall tracer), per node.
    wrappers: BTreeMap<u64, Vec<String>>,
    /// Extra environment per node, for every incarnation.
    node_env: BTreeMap<u64, Vec<(String, String)>>,
    /// HTTPS to clients and mutual TLS to peers with these certificates.
    tls: Option<&'a TlsCerts>,
    /// Runs for every node before its first start.
    prepare: Option<&'a Prepare<'a>>,
    /// Runs this binary instead of [`binary()`] (e.g. [`release_binary()`]).
    bin: Option<PathBuf>,
}

/// A cluster of real processes on loopback.
pub struct Cluster {
    nodes: BTreeMap<u64, NodeProc>,
    peers: String,
    pub secret: String,
    pub platform: String,
    /// The cluster's temporary directory (data directories, node logs), removed with it.
    dir: tempfile::TempDir,
    pub http: reqwest::Client,
    extra_args: Vec<String>,
    /// Per-node flags of the current incarnation, after `extra_args`.
    node_args: BTreeMap<u64, Vec<String>>,
    /// Per-node environment of the current incarnation (e.g. a libfaketime clock skew).
    node_env: BTreeMap<u64, Vec<(String, String)>>,
    /// Routes node-to-node traffic when started with [`Cluster::start_behind_proxy`].
    proxy: Option<proxy::FaultProxy>,
    /// The binary every (re)start runs.
    bin: PathBuf,
    /// Per-node command prefix (e.g. `strace -f -o ...`) the binary runs under, for tests
    /// that observe a node from outside.
    wrappers: BTreeMap<u64, Vec<String>>,
    /// `https` for a cluster started with [`Cluster::start_tls`], else `http`.
    pub scheme: &'static str,
}

/// PEM files made by `raftlock certs`: a CA and one node certificate (SANs 127.0.0.1 and
/// localhost) that every node of a test cluster presents, to clients and to peers.
#[derive(Debug, Clone)]
pub struct TlsCerts {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsCerts {
    /// Runs `raftlock certs` in `dir` (reusing its CA when there is one) for node `name`.
    pub fn make(dir: &std::path::Path, name: &str, days: u32) -> Result<TlsCerts> {
        let out = std::process::Command::new(binary())
            .args(["certs", "--node", &format!("{name}=127.0.0.1,localhost")])
            .args(["--days", &days.to_string()])
            .arg("--out")
            .arg(dir)
            .output()?;
        if !out.status.success() {
            bail!("raftlock certs: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(TlsCerts {
            dir: dir.to_path_buf(),
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}-key.pem")),
        })
    }

    /// The `serve` flags for HTTPS to clients and mutual TLS to peers with these files.
    pub fn serve_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, path) in [
            ("--tls-cert", &self.cert),
            ("--tls-key", &self.key),
            ("--peer-tls-cert", &self.cert),
            ("--peer-tls-key", &self.key),
            ("--peer-ca", &self.ca),
        ] {
            args.push(flag.to_string());
            args.push(path.display().to_string());
        }
        args
    }

    /// An HTTPS client that trusts this CA.
    pub fn client(&self) -> Result<reqwest::Client> {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.ca)?)?;
        Ok(reqwest::Client::builder()
            .add_root_certificate(ca)
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(20))
            .build()?)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(c) = node.child.take() {
                kill_tree(c);
            }
        }
    }
}

/// SIGKILLs `child` and every process below it. A wrapper's node is the wrapper's child, and
/// a tracer killed with SIGKILL (or stopped with SIGTERM) lets its tracee run on: seen with
/// `strace -f sleep` here, where `sleep` outlived both.
pub fn kill_tree(mut child: std::process::Child) {
    let mut below = Vec::new();
    descendants(child.id(), &mut below);
    let _ = child.kill();
    for pid in below {
        // SAFETY: kill(2) with a pid read from /proc just now; at worst it names a process
        // that already exited (ESRCH).
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    let _ = child.wait();
}

/// Every process below `pid`, from `/proc/<pid>/task/<tid>/children`.
fn descendants(pid: u32, out: &mut Vec<u32>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            out.push(child);
            descendants(child, out);
        }
    }
}

impl Cluster {
    /// Starts `n` nodes with ids 1..=n that form a cluster by themselves.
    pub async fn start(n: u64) -> Result<Cluster> {
        Self::start_with(n, &[]).await
    }

    /// Like [`Cluster::start`], running the optimised binary ([`release_binary()`]): for
    /// tests that measure what a node costs.
    pub async fn start_release(n: u64) -> Result<Cluster> {
        let spec = LaunchSpec {
            bin: Some(release_binary()?),
            ..LaunchSpec::default()
        };
        Self::launch(n, &spec).await
    }

    /// Like [`Cluster::start`] with extra `serve` flags for every node.
    pub async fn start_with(n: u64, extra: &[&str]) -> Result<Cluster> {
        Self::launch(
            n,
            &LaunchSpec {
                extra,
                ..LaunchSpec::default()
            },
        )
        .await
    }

    /// Like [`Cluster::start_with`], but every node's `--peers` names a [`proxy::FaultProxy`]
    /// listener per node instead of its real address, so every node-to-node request (Raft
    /// RPCs, forwarded client requests) passes the proxy and obeys its link rules. Clients
    /// still talk to the real addresses ([`Cluster::url`]).
    pub async fn start_behind_proxy(n: u64, extra: &[&str]) -> Result<Cluster> {
        let spec = LaunchSpec {
            extra,
            behind_proxy: true,
            ..LaunchSpec::default()
        };
        Self::launch(n, &spec).await
    }

    /// [`Cluster::start_behind_proxy`] with extra environment per node for every incarnation
    /// (e.g. [`Skew::env`]).
    pub async fn start_behind_proxy_with_env(
        n: u64,
        extra: &[&str],
        node_env: BTreeMap<u64, Vec<(String, String)>>,
    ) -> Result<Cluster> {
        let spec = LaunchSpec {
            extra,
            behind_proxy: true,
            node_env,
            ..LaunchSpec::default()
        };
        Self::launch(n, &spec).await
    }

    /// Like [`Cluster::start`], but node `id` runs as `wrapper... raftlock serve ...` for every
    /// `(id, wrapper)` in `wrappers` (a syscall tracer, for instance).
    pub async fn start_wrapped(n: u64, wrappers: BTreeMap<u64, Vec<String>>) -> Result<Cluster> {
        Self::launch(
            n,
            &LaunchSpec {
                wrappers,
                ..LaunchSpec::default()
            },
        )
        .await
    }

    /// Like [`Cluster::start`], with extra environment for some nodes from the first start
    /// on (e.g. [`Skew::env`]).
    pub async fn start_with_env(
        n: u64,
        node_env: BTreeMap<u64, Vec<(String, String)>>,
    ) -> Result<Cluster> {
        Self::launch(
            n,
            &LaunchSpec {
                node_env,
                ..LaunchSpec::default()
            },
        )
        .await
    }

    /// Like [`Cluster::start_with`], but every node also has a peer listener
    /// (`--peer-listen`, kept for every incarnation) and `--peers` names those: node-to-node
    /// traffic never uses the client addresses ([`Cluster::url`]). Returns the cluster and
    /// each node's peer address.
    pub async fn start_with_peer_listeners(
        n: u64,
        extra: &[&str],
    ) -> Result<(Cluster, BTreeMap<u64, String>)> {
        Self::start_with_peer_listeners_wrapped(n, extra, BTreeMap::new()).await
    }

    /// [`Cluster::start_with_peer_listeners`] with wrapped nodes, as in
    /// [`Cluster::start_wrapped`] (e.g. `prlimit` for a node's resource limits).
    pub async fn start_with_peer_listeners_wrapped(
        n: u64,
        extra: &[&str],
        wrappers: BTreeMap<u64, Vec<String>>,
    ) -> Result<(Cluster, BTreeMap<u64, String>)> {
        let spec = LaunchSpec {
            extra,
            peer_listeners: true,
            wrappers,
            ..LaunchSpec::default()
        };
        let cluster = Self::launch(n, &spec).await?;
        let peer_addrs = cluster
            .nodes
            .iter()
            .filter_map(|(id, n)| Some((*id, n.peer_addr.clone()?)))
            .collect();
        Ok((cluster, peer_addrs))
    }

    /// Like [`Cluster::start`], but `prepare(id, data_dir, peers)` runs for every node before
    /// its first start (e.g. `raftlock snapshot restore` into the empty data directory).
    pub async fn start_prepared(n: u64, prepare: &Prepare<'_>) -> Result<Cluster> {
        let spec = LaunchSpec {
            prepare: Some(prepare),
            ..LaunchSpec::default()
        };
        Self::launch(n, &spec).await
    }

    /// Starts `n` nodes serving HTTPS to clients and mutual TLS to peers (each on its own
    /// peer listener), all with the certificate in `certs`; the cluster's HTTP client trusts
    /// the CA.
    pub async fn start_tls(n: u64, certs: &TlsCerts, extra: &[&str]) -> Result<Cluster> {
        let spec = LaunchSpec {
            extra,
            peer_listeners: true,
            tls: Some(certs),
            ..LaunchSpec::default()
        };
        Self::launch(n, &spec).await
    }

    /// [`Cluster::launch_once`], again with new ports (up to [`LAUNCH_ATTEMPTS`] times) when
    /// a node could not bind the port chosen for it. [`free_port`] checks a port is free, but
    /// something else may bind it before the node does: `make test` saw a node exit with
    /// "Address already in use" once (12-04, the console suite, not reproduced); the failure
    /// is the set-up's, never the subject of a test, so a fresh start is the right answer.
    async fn launch(n: u64, spec: &LaunchSpec<'_>) -> Result<Cluster> {
        let mut attempt = 1;
        loop {
            match Self::launch_once(n, spec).await {
                Err(e) if attempt < LAUNCH_ATTEMPTS && format!("{e:#}").contains(PORT_TAKEN) => {
                    eprintln!("cluster set-up, attempt {attempt}: a node's port was taken ({e:#}); starting again on new ports");
                    attempt += 1;
                }
                launched => return launched,
            }
        }
    }

    async fn launch_once(n: u64, spec: &LaunchSpec<'_>) -> Result<Cluster> {
        let LaunchSpec {
            extra,
            behind_proxy,
            peer_listeners,
            tls,
            prepare,
            ..
        } = *spec;
        let dir = tempfile::tempdir()?;
        let mut nodes = BTreeMap::new();
        for id in 1..=n {
            let addr = format!("127.0.0.1:{}", free_port());
            let peer_addr = peer_listeners.then(|| format!("127.0.0.1:{}", free_port()));
            nodes.insert(
                id,
                NodeProc {
                    addr,
                    peer_addr,
                    data_dir: dir.path().join(id.to_string()),
                    child: None,
                },
            );
        }
        // A long (chaos) run pins a private copy of the binary: a rebuild of
        // target/debug/raftlock mid-run (by anyone on a shared checkout) must not make a
        // restarted node run different code against data written by the old one.
        let bin = if let Some(bin) = &spec.bin {
            bin.clone()
        } else if behind_proxy {
            let pinned = dir.path().join("raftlock");
            std::fs::copy(binary(), &pinned)
                .with_context(|| format!("copying {}", binary().display()))?;
            pinned
        } else {
            binary()
        };
        let proxy = if behind_proxy {
            let targets = nodes
                .iter()
                .map(|(id, n)| (*id, n.peer_addr().to_string()))
                .collect();
            Some(proxy::FaultProxy::start(&targets).await?)
        } else {
            None
        };
        let peers = nodes
            .iter()
            .map(|(id, n)| {
                let addr = proxy
                    .as_ref()
                    .map_or(n.peer_addr().to_string(), |p| p.addr(*id));
                format!("{id}={addr}")
            })
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            nodes,
            peers,
            secret: format!("secret-{}", uuid::Uuid::new_v4()),
            platform: format!("platform-{}", uuid::Uuid::new_v4()),
            dir,
            http: match tls {
                Some(certs) => certs.client()?,
                None => reqwest::Client::builder()
                    .timeout(Duration::from_secs(20))
                    .build()?,
            },
            extra_args: (extra.iter().map(|s| s.to_string()))
                .chain(tls.map(TlsCerts::serve_args).into_iter().flatten())
                .collect(),
            node_args: BTreeMap::new(),
            node_env: spec.node_env.clone(),
            proxy,
            bin,
            wrappers: spec.wrappers.clone(),
            scheme: if tls.is_some() { "https" } else { "http" },
        };
        for id in 1..=n {
            if let Some(prepare) = prepare {
                prepare(id, &cluster.data_dir(id), &cluster.peers)?;
            }
            cluster.spawn(id, &cluster.peers.clone())?;
        }
        // Set-up, not the subject: generous for a loaded 2-core CI machine running debug
        // builds, and on failure it says what each node saw (seen once in CI, not locally).
        if let Err(e) = cluster.wait_for_leader(Duration::from_secs(30)).await {
            let mut seen = Vec::new();
            for id in cluster.ids() {
                let view = cluster.view(id).await;
                seen.push(format!(
                    "node {id} ({}): {view:?}; its log ends: {}",
                    cluster.process_state(id),
                    cluster.log_tail(id, 5)
                ));
            }
            bail!("{e}; {}", seen.join("; "));
        }
        Ok(cluster)
    }

    fn spawn(&mut self, id: u64, peers: &str) -> Result<()> {
        let log = std::env::var("RAFTLOCK_TEST_LOG").unwrap_or_else(|_| "warn".into());
        let stderr = if std::env::var("RAFTLOCK_TEST_LOG").is_ok() {
            Stdio::inherit()
        } else {
            // Warnings and errors only: kept for the set-up failure's report.
            Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.log_path(id))?,
            )
        };
        let node = self.nodes.get_mut(&id).context("unknown node")?;
        let mut command = match self.wrappers.get(&id) {
            Some(wrapper) => {
                let mut c = Command::new(&wrapper[0]);
                c.args(&wrapper[1..]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let cmd = command
            .args([
                "serve",
                "--node-id",
                &id.to_string(),
                "--listen",
                &node.addr,
                "--peers",
                peers,
            ])
            .args(
                node.peer_addr
                    .iter()
                    .flat_map(|a| ["--peer-listen", a.as_str()]),
            )
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args([
                "--cluster-secret",
                &self.secret,
                "--platform-token",
                &self.platform,
            ])
            .args(&self.extra_args)
            .args(self.node_args.get(&id).into_iter().flatten())
            .env("RAFTLOCK_LOG", log)
            // After RAFTLOCK_LOG, so a test can raise one node's log level.
            .envs(self.node_env.get(&id).into_iter().flatten().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child =
            spawn_retrying_busy(cmd).with_context(|| format!("spawning {}", self.bin.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// Adds a node process (not yet a member) that will be joined through the admin API.
    pub fn spawn_extra(&mut self, id: u64) -> Result<String> {
        let addr = format!("127.0.0.1:{}", free_port());
        let data_dir = self.dir.path().join(id.to_string());
        self.nodes.insert(
            id,
            NodeProc {
                addr: addr.clone(),
                peer_addr: None,
                data_dir,
                child: None,
            },
        );
        self.extra_args.push("--join".into());
        let spawned = self.spawn(id, &format!("{id}={addr}"));
        self.extra_args.pop();
        spawned?;
        Ok(addr)
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// The `--peers` value every node was started with.
    pub fn peers_arg(&self) -> String {
        self.peers.clone()
    }

    pub fn addr(&self, id: u64) -> String {
        self.nodes[&id].addr.clone()
    }

    /// What the `raftlock` CLI prints with `--json` when the platform operator runs `args`
    /// against node `id` (its stderr as the error's context when that is not JSON).
    pub fn cli_json(&self, id: u64, args: &[&str]) -> Result<Value> {
        let out = Command::new(binary())
            .args(args)
            .args(["--json", "--endpoints", &self.addr(id)])
            .args(["--platform-token", &self.platform])
            .output()?;
        serde_json::from_slice(&out.stdout)
            .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())
    }

    pub fn url(&self, id: u64, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.nodes[&id].addr)
    }

    /// Node `id`'s peer listener, when it has one apart from its client address.
    pub fn peer_addr(&self, id: u64) -> Option<String> {
        self.nodes[&id].peer_addr.clone()
    }

    /// The cluster's temporary directory: the nodes' data directories and logs live in it.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Where node `id`'s stderr goes (every incarnation appends), unless `RAFTLOCK_TEST_LOG`
    /// sends it to the test's own.
    fn log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}.log"))
    }

    /// Every line node `id` logged to its log file (all incarnations; warnings and errors
    /// unless `RAFTLOCK_TEST_LOG` says otherwise, which sends them to the test's stderr).
    pub fn log_lines(&self, id: u64) -> Vec<String> {
        let bytes = std::fs::read(self.log_path(id)).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The first and the last `lines` lines node `id` logged, joined with ` | `: an exit at
    /// start prints its error first and a long backtrace after it.
    fn log_tail(&self, id: u64, lines: usize) -> String {
        let all = self.log_lines(id);
        if all.len() <= 2 * lines {
            return all.join(" | ");
        }
        let (first, last) = (&all[..lines], &all[all.len() - lines..]);
        format!("{} | … | {}", first.join(" | "), last.join(" | "))
    }

    /// Whether node `id`'s process is alive, has exited (with what), or was stopped.
    fn process_state(&mut self, id: u64) -> String {
        match self.nodes.get_mut(&id).and_then(|n| n.child.as_mut()) {
            None => "stopped by the test".into(),
            Some(child) => match child.try_wait() {
                Ok(None) => "process alive".into(),
                Ok(Some(status)) => format!("process exited: {status}"),
                Err(e) => format!("process unknown: {e}"),
            },
        }
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes[&id].child.is_some()
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill(&mut self, id: u64) {
        if let Some(c) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
            kill_tree(c);
        }
    }

    /// SIGTERM, then waits for the process to exit: lets a wrapper (a tracer) flush its output.
    pub fn terminate(&mut self, id: u64) -> Result<()> {
        let mut below = Vec::new();
        if let Some(pid) = self.pid(id) {
            descendants(pid, &mut below);
        }
        if self.is_running(id) {
            self.signal(id, libc::SIGTERM)?;
        }
        if let Some(mut c) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
            c.wait()?;
        }
        // A wrapper's node outlives the wrapper (see `kill_tree`).
        for pid in below {
            // SAFETY: as in `kill_tree`.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        Ok(())
    }

    /// Deletes a (killed) node's data directory: a lost disk.
    pub fn wipe(&mut self, id: u64) -> Result<()> {
        let dir = self.nodes[&id].data_dir.clone();
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        Ok(())
    }

    /// Restarts a killed node on its data directory.
    pub fn restart(&mut self, id: u64) -> Result<()> {
        self.restart_with(id, &[])
    }

    /// Restarts a killed node with `args` added to its flags for this incarnation only (its
    /// environment stays as it was).
    pub fn restart_with(&mut self, id: u64, args: &[&str]) -> Result<()> {
        let env = self.node_env.get(&id).cloned().unwrap_or_default();
        self.restart_with_env(id, args, env)
    }

    /// Restarts a killed node with `args` and `env` for this incarnation only (e.g.
    /// [`Skew::env`] to run it on a skewed wall clock).
    pub fn restart_with_env(
        &mut self,
        id: u64,
        args: &[&str],
        env: Vec<(String, String)>,
    ) -> Result<()> {
        self.node_args
            .insert(id, args.iter().map(|s| s.to_string()).collect());
        self.node_env.insert(id, env);
        let peers = self.peers.clone();
        self.spawn(id, &peers)
    }

    /// Restarts a killed node as `wrapper... raftlock serve ...` (see
    /// [`Cluster::start_wrapped`]), for this and later incarnations.
    pub fn restart_wrapped(&mut self, id: u64, wrapper: Vec<String>) -> Result<()> {
        self.wrappers.insert(id, wrapper);
        self.restart(id)
    }

    /// The fault proxy, when started with [`Cluster::start_behind_proxy`].
    pub fn proxy(&self) -> Option<&proxy::FaultProxy> {
        self.proxy.as_ref()
    }

    /// The data directory of node `id`.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.nodes[&id].data_dir.clone()
    }

    /// Node `id`'s clock hint: the cluster time it saves every second and starts from after a
    /// restart (`raftlock_server::clock`).
    pub fn clock_hint(&self, id: u64) -> PathBuf {
        self.data_dir(id).join("clock_hint")
    }

    /// Waits until node `id` has saved a clock hint, written after `after` when given.
    pub async fn wait_for_clock_hint(
        &self,
        id: u64,
        after: Option<SystemTime>,
        within: Duration,
    ) -> Result<()> {
        let hint = self.clock_hint(id);
        eventually(
            within,
            &format!("node {id} to save a clock hint"),
            || async {
                let written = std::fs::metadata(&hint).ok()?.modified().ok()?;
                after.is_none_or(|after| written > after).then_some(())
            },
        )
        .await
    }

    /// Process id of a running node.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.nodes[&id].child.as_ref().map(|c| c.id())
    }

    /// SIGSTOP: the process freezes (its sockets stay open) until [`Cluster::resume`].
    pub fn pause(&self, id: u64) -> Result<()> {
        self.signal(id, libc::SIGSTOP)
    }

    /// SIGCONT after [`Cluster::pause`].
    pub fn resume(&self, id: u64) -> Result<()> {
        self.signal(id, libc::SIGCONT)
    }

    fn signal(&self, id: u64, sig: libc::c_int) -> Result<()> {
        let pid = self.pid(id).context("node not running")?;
        // SAFETY: `kill(2)` on the pid of a child this harness spawned and has not reaped.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        if rc != 0 {
            bail!("kill({pid}, {sig}): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Node `id`'s `/metrics` text, if it answers.
    pub async fn metrics_text(&self, id: u64) -> Option<String> {
        let resp = self
            .http
            .get(self.url(id, "/metrics"))
            .bearer_auth(&self.platform)
            .send()
            .await
            .ok()?;
        resp.text().await.ok()
    }

    /// The value of the unlabelled metric `name` on node `id`, if it answers and has one.
    pub async fn metric(&self, id: u64, name: &str) -> Option<f64> {
        let text = self.metrics_text(id).await?;
        let prefix = format!("{name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))?
            .trim()
            .parse()
            .ok()
    }

    /// The shards as node `id` lists them (`/admin/v1/shards`: the meta group, id 0, first),
    /// if it answers.
    pub async fn shards(&self, id: u64) -> Option<Vec<Value>> {
        let resp = self
            .http
            .get(self.url(id, "/admin/v1/shards"))
            .bearer_auth(&self.platform)
            .send()
            .await
            .ok()?;
        let body: Value = resp.json().await.ok()?;
        body["shards"].as_array().cloned()
    }

    /// The leader of `group` as node `id` sees it (group 0 is the meta group), if it answers
    /// and hosts a replica that knows one.
    pub async fn group_leader(&self, id: u64, group: u64) -> Option<u64> {
        let shards = self.shards(id).await?;
        shards.iter().find(|s| s["id"] == group)?["leader"].as_u64()
    }

    /// Creates a data shard on `members` (through the first node); answers its id.
    pub async fn create_shard(&self, members: &[u64]) -> Result<u64> {
        let body = json!({ "members": members });
        let r = self
            .admin_post(self.ids()[0], "/admin/v1/shards", body)
            .await?;
        anyhow::ensure!(r.status().as_u16() == 201, "create shard: {}", r.status());
        let created: Value = r.json().await?;
        created["id"].as_u64().context("shard id")
    }

    /// The leader of `group` every running member agrees on (like [`Cluster::wait_for_leader`]
    /// for the meta group).
    pub async fn wait_for_group_leader(&self, group: u64, within: Duration) -> Result<u64> {
        eventually(
            within,
            "a group leader all running members agree on",
            || async {
                let mut leader = None;
                for id in self.ids().into_iter().filter(|id| self.is_running(*id)) {
                    let Some(l) = self.group_leader(id, group).await else {
                        continue;
                    };
                    if leader.is_some_and(|x| x != l) {
                        return None;
                    }
                    leader = Some(l);
                }
                leader.filter(|l| self.is_running(*l))
            },
        )
        .await
    }

    /// This node's `/admin/v1/cluster` view, if it answers.
    pub async fn view(&self, id: u64) -> Option<Value> {
        let resp = self
            .http
            .get(self.url(id, "/admin/v1/cluster"))
            .bearer_auth(&self.platform)
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .ok()?;
        resp.json().await.ok()
    }

    /// Waits until every running node agrees on one leader; returns its id.
    pub async fn wait_for_leader(&self, within: Duration) -> Result<u64> {
        eventually(within, "a leader all running nodes agree on", || async {
            let mut leader = None;
            for id in self.ids().into_iter().filter(|id| self.is_running(*id)) {
                let l = self.view(id).await?.get("leader")?.as_u64()?;
                if leader.is_some_and(|x| x != l) {
                    return None;
                }
                leader = Some(l);
            }
            leader.filter(|l| self.is_running(*l))
        })
        .await
    }

    /// Some running node other than `id`.
    pub fn other_than(&self, ids: &[u64]) -> u64 {
        self.ids()
            .into_iter()
            .find(|i| !ids.contains(i) && self.is_running(*i))
            .expect("another running node")
    }

    /// Creates a project and a key of `kind`; returns the key secret. Set-up, not the subject:
    /// a `503` (no leader for a moment, e.g. an election on a loaded CI machine right after
    /// start) is retried as a client following `Retry-After` would.
    pub async fn project_key(&self, project: &str, kind: &str, scopes: &[&str]) -> Result<String> {
        let node = self.ids()[0];
        let r = self
            .admin_post_until_served(node, "/admin/v1/projects", json!({ "name": project }))
            .await?;
        if !(r.status().is_success() || r.status().as_u16() == 409) {
            bail!("create project: {}", r.status());
        }
        let path = format!("/admin/v1/projects/{project}/keys");
        let r = self
            .admin_post_until_served(node, &path, json!({ "kind": kind, "scopes": scopes }))
            .await?;
        if r.status().as_u16() != 201 {
            bail!("create key: {} {}", r.status(), r.text().await?);
        }
        let body: Value = r.json().await?;
        Ok(body["secret"].as_str().context("secret")?.to_string())
    }

    /// Lifts `project`'s project-lock rate limit out of the way of a load test.
    pub async fn lift_rate_limit(&self, project: &str) -> Result<()> {
        let node = self.ids()[0];
        let r = self
            .http
            .patch(self.url(node, &format!("/admin/v1/projects/{project}")))
            .bearer_auth(&self.platform)
            .json(&json!({ "lock_ops_per_minute": 1_000_000 }))
            .send()
            .await?;
        if r.status().as_u16() != 200 {
            bail!("lifting the rate limit: {}", r.status());
        }
        Ok(())
    }

    pub async fn admin_post(
        &self,
        node: u64,
        path: &str,
        body: Value,
    ) -> Result<reqwest::Response> {
        Ok(self
            .http
            .post(self.url(node, path))
            .bearer_auth(&self.platform)
            .json(&body)
            .send()
            .await?)
    }

    /// [`Cluster::admin_post`], repeated for up to 15 s while the answer is `503` (no leader
    /// or no quorum for a moment). For set-up steps only.
    async fn admin_post_until_served(
        &self,
        node: u64,
        path: &str,
        body: Value,
    ) -> Result<reqwest::Response> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = self.admin_post(node, path, body.clone()).await?;
            if r.status().as_u16() != 503 || Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A project-lock client bound to one node and key, for terse tests.
#[derive(Clone)]
pub struct Locks {
    pub http: reqwest::Client,
    pub base: String,
    pub key: String,
}

/// A project-lock answer: status and JSON body (`Null` for empty bodies).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Answer {
    async fn from(resp: reqwest::Response) -> Result<Answer> {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await?;
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok(Answer {
            status,
            body,
            headers,
        })
    }

    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    pub fn fencing(&self) -> u64 {
        self.body["fencing_token"].as_u64().expect("fencing_token")
    }
}

impl Locks {
    pub fn new(cluster: &Cluster, node: u64, key: &str) -> Locks {
        Locks {
            http: cluster.http.clone(),
            base: cluster.url(node, ""),
            key: key.to_string(),
        }
    }

    pub fn on(&self, cluster: &Cluster, node: u64) -> Locks {
        Locks {
            base: cluster.url(node, ""),
            ..self.clone()
        }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
    }

    pub async fn acquire(&self, name: &str, token: &str, ttl: u64) -> Result<Answer> {
        let r = self
            .req(reqwest::Method::POST, &format!("/locks/{name}/lease"))
            .header("X-Volcano-Lock-Token", token)
            .json(&json!({ "ttl_seconds": ttl }));
        Answer::from(r.send().await?).await
    }

    pub async fn renew(&self, name: &str, token: &str, ttl: u64) -> Result<Answer> {
        let r = self
            .req(reqwest::Method::PATCH, &format!("/locks/{name}/lease"))
            .header("X-Volcano-Lock-Token", token)
            .json(&json!({ "ttl_seconds": ttl }));
        Answer::from(r.send().await?).await
    }

    pub async fn release(&self, name: &str, token: &str) -> Result<Answer> {
        let r = self
            .req(reqwest::Method::DELETE, &format!("/locks/{name}/lease"))
            .header("X-Volcano-Lock-Token", token);
        Answer::from(r.send().await?).await
    }

    pub async fn read(&self, name: &str) -> Result<Answer> {
        Answer::from(
            self.req(reqwest::Method::GET, &format!("/locks/{name}"))
                .send()
                .await?,
        )
        .await
    }

    pub async fn force_release(&self, name: &str) -> Result<Answer> {
        Answer::from(
            self.req(reqwest::Method::DELETE, &format!("/locks/{name}"))
                .send()
                .await?,
        )
        .await
    }

    /// A raw request for validation tests.
    pub async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Answer> {
        let mut r = self.req(method, path);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if let Some(b) = body {
            r = r.header("content-type", "application/json").body(b);
        }
        Answer::from(r.send().await?).await
    }

    /// A hierarchical RPC.
    pub async fn rpc(&self, method: &str, body: Value) -> Result<Answer> {
        let r = self
            .req(reqwest::Method::POST, &format!("/v1beta/{method}"))
            .json(&body);
        Answer::from(r.send().await?).await
    }
}

/// Raises this process's open-file limit to `want` (children inherit it), for tests that open
/// thousands of sockets on both ends of the loopback.
pub fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid, initialized struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Spawns `cmd`, retrying while the kernel says the binary is busy (`ETXTBSY`): a test that
/// just copied a private binary can meet a child that another test forked meanwhile and that
/// still holds the copy's write descriptor until it execs.
fn spawn_retrying_busy(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// The length of a WAL segment's `bytes` up to its last non-zero byte: without the
/// preallocated zeros after its last frame (nor the few zero bytes that frame may end with).
pub fn written_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1)
}

/// The bytes of a data directory's WAL segments that frames were written to: each segment up
/// to its last non-zero byte, so without the preallocated zeros after its last frame (nor
/// the few zero bytes that frame may end with).
pub fn wal_written_bytes(dir: &std::path::Path) -> Result<usize> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("wal-"))
        {
            total += written_len(&std::fs::read(&path)?);
        }
    }
    Ok(total)
}

/// The WAL segments of a data directory, concatenated in order.
pub fn wal_bytes(dir: &std::path::Path) -> Result<Vec<u8>> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    names.retain(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("wal-"))
    });
    names.sort();
    let mut bytes = Vec::new();
    for name in names {
        bytes.extend(std::fs::read(name)?);
    }
    Ok(bytes)
}

/// Copies a node's data directory (files only, without its `LOCK`) into `to`.
pub fn copy_data_dir(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// A fresh lock token.
pub fn token() -> String {
    uuid::Uuid::new_v4().to_string()
}
