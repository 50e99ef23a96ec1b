//! A per-link fault proxy for node-to-node traffic.
//!
//! Every node listens on its real address (clients talk to it directly), but the `--peers`
//! list every node is given names, for node `j`, the address of a proxy `P_j` that forwards
//! to `j`'s real address. Nodes name themselves in the `x-raftlock-from` header on every
//! node-to-node request (Raft RPCs and forwarded client requests), so `P_j` knows the link
//! `from → j` each request travels on and applies that link's [`Rule`].
//!
//! Raft RPCs travel on peer streams (HTTP connections upgraded to frames, see
//! `raftlock_raft::peer_stream`): the proxy forwards the upgrade, then relays the stream frame
//! by frame, judging each request frame by the link's rule when it arrives, exactly as it
//! judges a plain request. Inside a stream there is no status to answer with, so `Drop` and
//! `Refuse503` both end the stream (the sender sees it break).
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
use raftlock_raft::network::MAX_RPC_BODY;
use raftlock_raft::peer_stream::{read_frame, write_frame};
use tokio::io::{AsyncRead, AsyncWrite, BufStream};
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

    /// Holds a blackholed request until the rule of its link changes (the sender has usually
    /// given up by then); bounded so a forgotten rule cannot pin tasks forever.
    async fn hold(&self, from: u64, to: u64) {
        let mut changes = self.generation.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(120), async {
            while self.rule(from, to) == Rule::Blackhole {
                if changes.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
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
                            .with_upgrades()
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
    mut req: Request<Incoming>,
) -> Result<Reply, ResetConnection> {
    let from: Option<u64> = req
        .headers()
        .get(SOURCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    // Taken before the request is split: the handle to the client's side of an upgrade.
    let upgrade = req
        .headers()
        .contains_key(hyper::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
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
        // A stream's upgrade is not delayed: the delay applies to each of its frames.
        Rule::Delay(_) if upgrade.is_some() => {}
        Rule::Delay(ms) => {
            stats.delayed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Rule::Blackhole => {
            stats.blackholed.fetch_add(1, Ordering::Relaxed);
            let from = from.expect("a rule other than pass has a source");
            shared.hold(from, to).await;
            return Err(ResetConnection);
        }
    }
    if let Some(client_side) = upgrade {
        return open_stream(shared, from, to, &target, parts, client_side).await;
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

/// Forwards a peer-stream upgrade (its own rule already applied like any request's, except a
/// delay or a lost answer, which apply to the frames) and, once both sides are upgraded,
/// relays frames.
async fn open_stream(
    shared: Arc<Shared>,
    from: Option<u64>,
    to: u64,
    target: &str,
    parts: hyper::http::request::Parts,
    client_side: hyper::upgrade::OnUpgrade,
) -> Result<Reply, ResetConnection> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = shared
        .client
        .request(parts.method.clone(), format!("http://{target}{path}"));
    for (name, value) in parts.headers.iter() {
        if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    let upstream_error = || {
        shared.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
        ResetConnection
    };
    let resp = out.send().await.map_err(|_| upstream_error())?;
    let status = resp.status();
    if status != hyper::StatusCode::SWITCHING_PROTOCOLS {
        let bytes = resp.bytes().await.map_err(|_| upstream_error())?;
        let mut reply = Response::new(Full::new(bytes));
        *reply.status_mut() = status;
        return Ok(reply);
    }
    let mut reply = Response::new(Full::new(Bytes::new()));
    *reply.status_mut() = status;
    for name in [hyper::header::CONNECTION, hyper::header::UPGRADE] {
        if let Some(value) = resp.headers().get(&name) {
            reply.headers_mut().insert(name, value.clone());
        }
    }
    let upstream = resp.upgrade().await.map_err(|_| upstream_error())?;
    tokio::spawn(async move {
        if let Ok(client) = client_side.await {
            let client = hyper_util::rt::TokioIo::new(client);
            relay_frames(&shared, from, to, client, upstream).await;
        }
    });
    Ok(reply)
}

/// Relays request frames to `upstream` and answers back, each judged by the link's rule
/// when it arrives; ending the stream (both sides) wherever a request would be reset.
async fn relay_frames(
    shared: &Shared,
    from: Option<u64>,
    to: u64,
    client: impl AsyncRead + AsyncWrite + Unpin,
    upstream: impl AsyncRead + AsyncWrite + Unpin,
) {
    let (mut client, mut upstream) = (BufStream::new(client), BufStream::new(upstream));
    let stats = &shared.stats;
    while let Ok((tag, body)) = read_frame(&mut client, MAX_RPC_BODY).await {
        let rule = from.map_or(Rule::Pass, |from| shared.rule(from, to));
        match rule {
            Rule::Pass | Rule::LoseAnswer => {}
            Rule::Drop => {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Rule::Refuse503 => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Rule::Delay(ms) => {
                stats.delayed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Rule::Blackhole => {
                stats.blackholed.fetch_add(1, Ordering::Relaxed);
                shared
                    .hold(from.expect("a rule other than pass has a source"), to)
                    .await;
                return;
            }
        }
        if write_frame(&mut upstream, tag, &body).await.is_err() {
            stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Ok((status, answer)) = read_frame(&mut upstream, MAX_RPC_BODY).await else {
            stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if rule == Rule::LoseAnswer {
            stats.answers_lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if write_frame(&mut client, status, &answer).await.is_err() {
            return;
        }
        stats.passed.fetch_add(1, Ordering::Relaxed);
    }
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

    /// An upstream that upgrades every request to a stream and echoes each frame's body back
    /// as an answer, counting the frames it saw.
    async fn echo_stream_upstream(seen: Arc<AtomicU64>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                        let seen = seen.clone();
                        let on_upgrade = hyper::upgrade::on(&mut req);
                        tokio::spawn(async move {
                            let io = hyper_util::rt::TokioIo::new(on_upgrade.await.unwrap());
                            let mut io = BufStream::new(io);
                            while let Ok((_, body)) = read_frame(&mut io, 1 << 20).await {
                                seen.fetch_add(1, Ordering::Relaxed);
                                if write_frame(&mut io, 0, &body).await.is_err() {
                                    break;
                                }
                            }
                        });
                        async {
                            let mut r = Response::new(Full::new(Bytes::new()));
                            *r.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
                            r.headers_mut()
                                .insert("connection", "upgrade".parse().unwrap());
                            r.headers_mut().insert("upgrade", "test".parse().unwrap());
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        addr
    }

    async fn open(proxy: &FaultProxy, from: u64, to: u64) -> BufStream<reqwest::Upgraded> {
        let resp = reqwest::Client::new()
            .get(format!("http://{}/s", proxy.addr(to)))
            .header("connection", "upgrade")
            .header("upgrade", "test")
            .header(SOURCE_HEADER, from.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 101);
        BufStream::new(resp.upgrade().await.unwrap())
    }

    /// One frame through a stream: the echoed body, or what went wrong.
    async fn frame(io: &mut BufStream<reqwest::Upgraded>, body: &[u8]) -> String {
        let exchange = async {
            write_frame(io, 1, body).await?;
            read_frame(io, 1 << 20).await
        };
        match tokio::time::timeout(Duration::from_millis(400), exchange).await {
            Ok(Ok((0, echoed))) => String::from_utf8(echoed).unwrap(),
            Ok(Ok((tag, _))) => format!("status {tag}"),
            Ok(Err(_)) => "closed".into(),
            Err(_) => "timeout".into(),
        }
    }

    #[tokio::test]
    async fn stream_frames_are_judged_one_by_one_by_the_rule_in_force() {
        let seen = Arc::new(AtomicU64::new(0));
        let up = echo_stream_upstream(seen.clone()).await;
        let targets = BTreeMap::from([(1, up.clone()), (2, up)]);
        let proxy = FaultProxy::start(&targets).await.unwrap();
        let mut s = open(&proxy, 1, 2).await;
        assert_eq!(frame(&mut s, b"one").await, "one");
        assert_eq!(frame(&mut s, b"two").await, "two", "the stream is kept");

        proxy.set(1, 2, Rule::Delay(150));
        let started = std::time::Instant::now();
        assert_eq!(frame(&mut s, b"late").await, "late");
        assert!(started.elapsed() >= Duration::from_millis(150));

        // A stream opened under a delay is not delayed itself; its frames are, once each.
        let delayed = proxy.stats().delayed.load(Ordering::Relaxed);
        let mut slow = open(&proxy, 1, 2).await;
        assert_eq!(
            proxy.stats().delayed.load(Ordering::Relaxed),
            delayed,
            "upgrade delayed"
        );
        assert_eq!(frame(&mut slow, b"once").await, "once");
        assert_eq!(proxy.stats().delayed.load(Ordering::Relaxed), delayed + 1);

        proxy.set(1, 2, Rule::LoseAnswer);
        let before = seen.load(Ordering::Relaxed);
        assert_eq!(frame(&mut s, b"lost").await, "closed");
        assert_eq!(
            seen.load(Ordering::Relaxed),
            before + 1,
            "delivered, answer lost"
        );

        proxy.heal();
        let mut s = open(&proxy, 1, 2).await;
        assert_eq!(frame(&mut s, b"again").await, "again");
        proxy.set(1, 2, Rule::Drop);
        let before = seen.load(Ordering::Relaxed);
        assert_eq!(frame(&mut s, b"dropped").await, "closed");
        assert_eq!(seen.load(Ordering::Relaxed), before, "never delivered");

        proxy.set(1, 2, Rule::Pass);
        let mut s = open(&proxy, 1, 2).await;
        let mut back = open(&proxy, 2, 1).await;
        proxy.set(1, 2, Rule::Blackhole);
        assert_eq!(frame(&mut s, b"held").await, "timeout");
        assert_eq!(
            frame(&mut back, b"other way").await,
            "other way",
            "one way only"
        );
        let stats = proxy.stats();
        assert_eq!(stats.answers_lost.load(Ordering::Relaxed), 1);
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(stats.blackholed.load(Ordering::Relaxed), 1);
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
