//! A per-link fault proxy for node-to-node traffic.
//!
//! Every node listens on its real address (clients talk to it directly), but the `--peers`
//! list every node is given names, for node `j`, the address of a proxy `P_j` that forwards
//! to `j`'s real address. Nodes name themselves in the `x-raftlock-from` header on every
//! node-to-node request (Raft RPCs and forwarded client requests), so `P_j` knows the link
//! `from → j` each request travels on and applies that link's [`Rule`].
//!
//! Rules act on requests, so a cut is directional: cutting `a → b` stops what `a` sends to
//! `b`, while `b`'s requests to `a` (and their answers) still pass — a one-way partition.
//! Cutting both directions of every link between two groups is a symmetric partition.
//! Requests without the header (none are expected) always pass.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use tokio::sync::watch;

/// The header nodes put on node-to-node requests (mirrors `raftlock_raft::SOURCE_HEADER`).
pub const SOURCE_HEADER: &str = "x-raftlock-from";

/// What happens to a request on one directed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// Forwarded unchanged.
    Pass,
    /// The connection is reset without an answer (the sender sees a transport error).
    Drop,
    /// Answered `503` by the proxy itself, never forwarded.
    Refuse503,
    /// Forwarded after this many milliseconds.
    Delay(u64),
    /// Held without an answer until the sender gives up or the rule changes; then the
    /// connection is reset. Never forwarded late.
    Blackhole,
    /// Forwarded and answered upstream, but the answer is thrown away and the connection
    /// reset: the sender cannot know whether its request took effect (it did).
    LoseAnswer,
}

/// Counters of what the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    pub passed: AtomicU64,
    pub dropped: AtomicU64,
    pub refused: AtomicU64,
    pub delayed: AtomicU64,
    pub blackholed: AtomicU64,
    pub answers_lost: AtomicU64,
    pub upstream_errors: AtomicU64,
}

struct Shared {
    rules: Mutex<HashMap<(u64, u64), Rule>>,
    /// Bumped on every rule change; wakes held (blackholed) requests.
    generation: watch::Sender<u64>,
    stats: ProxyStats,
    client: reqwest::Client,
}

impl Shared {
    fn rule(&self, from: u64, to: u64) -> Rule {
        self.rules
            .lock()
            .unwrap()
            .get(&(from, to))
            .copied()
            .unwrap_or(Rule::Pass)
    }
}

/// One listener per node, all sharing one rule table.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addrs: BTreeMap<u64, String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Marks a request whose connection must be reset instead of answered.
#[derive(Debug)]
struct ResetConnection;

impl std::fmt::Display for ResetConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fault proxy: connection reset")
    }
}

impl std::error::Error for ResetConnection {}

type Reply = Response<Full<Bytes>>;

fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "host"
            | "connection"
            | "content-length"
            | "transfer-encoding"
            | "keep-alive"
            | "upgrade"
            | "te"
            | "trailer"
            | "proxy-connection"
    )
}

impl FaultProxy {
    /// Starts one proxy listener on a free loopback port per `targets` entry
    /// (node id → real address).
    pub async fn start(targets: &BTreeMap<u64, String>) -> Result<FaultProxy> {
        let (generation, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            rules: Mutex::new(HashMap::new()),
            generation,
            stats: ProxyStats::default(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(330))
                .pool_idle_timeout(Duration::from_secs(30))
                .tcp_nodelay(true)
                .build()?,
        });
        let mut addrs = BTreeMap::new();
        let mut tasks = Vec::new();
        for (&to, target) in targets {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            addrs.insert(to, listener.local_addr()?.to_string());
            let shared = shared.clone();
            let target = target.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    let target = target.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            handle(shared.clone(), to, target.clone(), req)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            }));
        }
        Ok(FaultProxy {
            shared,
            addrs,
            tasks,
        })
    }

    /// The proxy address standing for node `id` (what goes into `--peers`).
    pub fn addr(&self, id: u64) -> String {
        self.addrs[&id].clone()
    }

    pub fn stats(&self) -> &ProxyStats {
        &self.shared.stats
    }

    /// Sets the rule of the directed link `from → to`.
    pub fn set(&self, from: u64, to: u64, rule: Rule) {
        {
            let mut rules = self.shared.rules.lock().unwrap();
            if rule == Rule::Pass {
                rules.remove(&(from, to));
            } else {
                rules.insert((from, to), rule);
            }
        }
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Applies `rule` to every link from a node of `from` to a node of `to`: a one-way cut.
    pub fn one_way(&self, from: &[u64], to: &[u64], rule: Rule) {
        for &a in from {
            for &b in to.iter().filter(|b| **b != a) {
                self.set(a, b, rule);
            }
        }
    }

    /// Applies `rule` to both directions between the groups: a symmetric partition.
    pub fn partition(&self, a: &[u64], b: &[u64], rule: Rule) {
        self.one_way(a, b, rule);
        self.one_way(b, a, rule);
    }

    /// Cuts `node` off from everyone else in `all`, both ways.
    pub fn isolate(&self, node: u64, all: &[u64], rule: Rule) {
        let others: Vec<u64> = all.iter().copied().filter(|i| *i != node).collect();
        self.partition(&[node], &others, rule);
    }

    /// Every link passes again; held requests are released (reset, not delivered).
    pub fn heal(&self) {
        self.shared.rules.lock().unwrap().clear();
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// The current non-pass rules, for logs.
    pub fn describe(&self) -> String {
        let rules = self.shared.rules.lock().unwrap();
        let mut v: Vec<_> = rules.iter().collect();
        v.sort();
        v.iter()
            .map(|((a, b), r)| format!("{a}->{b}:{r:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

async fn handle(
    shared: Arc<Shared>,
    to: u64,
    target: String,
    req: Request<Incoming>,
) -> Result<Reply, ResetConnection> {
    let from: Option<u64> = req
        .headers()
        .get(SOURCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|_| ResetConnection)?
        .to_bytes();
    let rule = from.map_or(Rule::Pass, |from| shared.rule(from, to));
    let stats = &shared.stats;
    match rule {
        Rule::Pass | Rule::LoseAnswer => {}
        Rule::Drop => {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(ResetConnection);
        }
        Rule::Refuse503 => {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            let mut r = Response::new(Full::new(Bytes::from_static(b"fault proxy: link refused")));
            *r.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
            return Ok(r);
        }
        Rule::Delay(ms) => {
            stats.delayed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Rule::Blackhole => {
            stats.blackholed.fetch_add(1, Ordering::Relaxed);
            let from = from.expect("a rule other than pass has a source");
            let mut changes = shared.generation.subscribe();
            // Held until the rule of this link changes (the sender has usually given up by
            // then); bounded so a forgotten rule cannot pin tasks forever.
            let _ = tokio::time::timeout(Duration::from_secs(120), async {
                while shared.rule(from, to) == Rule::Blackhole {
                    if changes.changed().await.is_err() {
                        break;
                    }
                }
            })
            .await;
            return Err(ResetConnection);
        }
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = shared
        .client
        .request(parts.method.clone(), format!("http://{target}{path}"))
        .body(body);
    for (name, value) in parts.headers.iter() {
        if !is_hop_by_hop(name.as_str()) {
            out = out.header(name, value);
        }
    }
    let resp = match out.send().await {
        Ok(r) => r,
        Err(_) => {
            stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
            return Err(ResetConnection);
        }
    };
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.map_err(|_| {
        stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
        ResetConnection
    })?;
    if rule == Rule::LoseAnswer {
        stats.answers_lost.fetch_add(1, Ordering::Relaxed);
        return Err(ResetConnection);
    }
    stats.passed.fetch_add(1, Ordering::Relaxed);
    let mut reply = Response::new(Full::new(bytes));
    *reply.status_mut() = status;
    for (name, value) in headers.iter() {
        if !is_hop_by_hop(name.as_str()) {
            reply.headers_mut().append(name.clone(), value.clone());
        }
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// A tiny upstream answering `200 ok` to everything.
    async fn upstream() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    }

    async fn call(http: &reqwest::Client, proxy: &FaultProxy, from: u64, to: u64) -> String {
        match http
            .post(format!("http://{}/x", proxy.addr(to)))
            .header(SOURCE_HEADER, from.to_string())
            .timeout(Duration::from_millis(400))
            .send()
            .await
        {
            Ok(r) => r.status().as_u16().to_string(),
            Err(e) if e.is_timeout() => "timeout".into(),
            Err(_) => "reset".into(),
        }
    }

    #[tokio::test]
    async fn rules_apply_per_directed_link() {
        let up = upstream().await;
        let targets = BTreeMap::from([(1, up.clone()), (2, up.clone()), (3, up)]);
        let proxy = FaultProxy::start(&targets).await.unwrap();
        let http = reqwest::Client::new();
        assert_eq!(call(&http, &proxy, 1, 2).await, "200");

        proxy.one_way(&[1], &[2], Rule::Drop);
        assert_eq!(call(&http, &proxy, 1, 2).await, "reset");
        assert_eq!(call(&http, &proxy, 2, 1).await, "200", "one way only");
        assert_eq!(call(&http, &proxy, 3, 2).await, "200");

        proxy.isolate(3, &[1, 2, 3], Rule::Refuse503);
        assert_eq!(call(&http, &proxy, 3, 1).await, "503");
        assert_eq!(call(&http, &proxy, 1, 3).await, "503");

        proxy.set(2, 3, Rule::Blackhole);
        assert_eq!(call(&http, &proxy, 2, 3).await, "timeout");

        proxy.set(2, 1, Rule::Delay(150));
        let started = std::time::Instant::now();
        assert_eq!(call(&http, &proxy, 2, 1).await, "200");
        assert!(started.elapsed() >= Duration::from_millis(150));

        proxy.heal();
        for (a, b) in [(1, 2), (3, 1), (2, 3)] {
            assert_eq!(call(&http, &proxy, a, b).await, "200");
        }
        let s = proxy.stats();
        assert!(s.dropped.load(Ordering::Relaxed) >= 1);
        assert!(s.blackholed.load(Ordering::Relaxed) >= 1);
    }
}
