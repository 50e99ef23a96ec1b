//! Connections: half-open connections, made-up methods, requests without credentials and
//! slow bodies neither block other clients nor hold a node's memory or connections.
//!
//! Its own test binary on purpose: its thousands of client sockets take ephemeral ports, which must
//! not race the free-port picks of clusters that other tests in the same process start.

use std::time::Duration;

use anyhow::{Context, Result};
use raftlock_tests::{raise_fd_limit, Cluster, Locks};

#[tokio::test]
async fn half_open_connections_neither_block_clients_nor_stay_open() -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    raise_fd_limit(8192);
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let term = cluster.view(leader).await.context("view")?["term"].clone();

    // 2,000 connections that send half a request head and then nothing; and some that send
    // nothing at all, or the start (or the whole) of an HTTP/2 preface: the listener speaks
    // HTTP/1 only, and its header-read timeout must cover a connection that has not begun.
    let mut slow = Vec::new();
    let openings: [&[u8]; 4] = [
        b"POST /locks/x/lease HTTP/1.1\r\nHost: slow\r\n",
        b"",
        b"PR",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ];
    for i in 0..2060 {
        let mut s = tokio::net::TcpStream::connect(cluster.addr(leader)).await?;
        let opening = if i < 2000 {
            openings[0]
        } else {
            openings[1 + i % 3]
        };
        s.write_all(opening).await?;
        slow.push((std::time::Instant::now(), s));
    }

    // A normal client on that node is answered promptly, and Raft stays healthy.
    let locks = Locks::new(&cluster, leader, &key);
    for i in 0..5 {
        let started = std::time::Instant::now();
        let a = locks
            .acquire(&format!("k{i}"), &raftlock_tests::token(), 30)
            .await?;
        assert_eq!(a.status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "answered after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        cluster.wait_for_leader(Duration::from_secs(5)).await?,
        leader
    );
    assert_eq!(cluster.view(leader).await.context("view")?["term"], term);

    // Every half-open connection is closed by the server within the header-read timeout of
    // when it was opened (plus slack for a loaded machine).
    let limit = raftlock_server_header_timeout() + Duration::from_secs(5);
    for (opened, mut s) in slow {
        let left = limit.saturating_sub(opened.elapsed());
        let mut buf = [0u8; 512];
        let closed = tokio::time::timeout(left, async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a half-open connection outlived {limit:?}");
    }
    Ok(())
}

/// The server's header-read timeout (crates/raftlock-server/src/listener.rs).
fn raftlock_server_header_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Sends `head` (and nothing more) on a new connection to `addr`; answers the first line of
/// the response and whether the server then closed the connection.
async fn raw_exchange(addr: &str, head: &[u8]) -> Result<(String, bool)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(head).await?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    let text = String::from_utf8_lossy(&got);
    Ok((text.lines().next().unwrap_or("").to_string(), closed))
}

/// `GET path` on a connection of its own (closed after): status line and body.
async fn raw_get(addr: &str, path: &str) -> Result<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await?;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await??;
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmRSS")?;
    Ok(kb * 1024)
}

/// Any token is a valid HTTP method. 1,000 requests to `/healthz`, each with its own 8 KB
/// method name, leave the node's memory and its `/metrics` as they were (the method label
/// is one of a fixed set). With the method as sent for a label they grew RSS by 8.7 MiB and
/// `/metrics` by 7.9 MiB.
#[tokio::test]
async fn made_up_methods_grow_neither_memory_nor_metrics() -> Result<()> {
    let cluster = Cluster::start(1).await?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let addr = cluster.addr(1);
    let pid = cluster.pid(1).context("pid")?;
    let request = |i: usize| {
        let method: String = format!("M{i:06}")
            .chars()
            .chain(std::iter::repeat_n('X', 8192))
            .collect();
        format!("{method} /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").into_bytes()
    };
    // Warm up: the allocator's pools and the one series of `other` methods.
    for i in 0..100 {
        raw_exchange(&addr, &request(i)).await?;
    }
    // (The first read of /metrics adds the series of /metrics itself.)
    cluster.metrics_text(1).await.context("metrics")?;
    let before_text = cluster.metrics_text(1).await.context("metrics")?;
    let metrics_before = before_text.len();
    let rss_before = rss_bytes(pid)?;
    for i in 100..1100 {
        let (status, _) = raw_exchange(&addr, &request(i)).await?;
        assert!(status.starts_with("HTTP/1.1 4"), "{status}");
    }
    let rss_after = rss_bytes(pid)?;
    let after_text = cluster.metrics_text(1).await.context("metrics")?;
    let metrics_after = after_text.len();
    let series = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' ').map(|(name, _)| name.to_string()))
            .collect()
    };
    let new: Vec<String> = series(&after_text)
        .difference(&series(&before_text))
        .cloned()
        .collect();
    assert!(new.is_empty(), "new series: {new:?}");
    println!(
        "RSS {rss_before} -> {rss_after} bytes, /metrics {metrics_before} -> {metrics_after} bytes"
    );
    assert!(
        rss_after < rss_before + (2 << 20),
        "RSS grew {} KiB",
        (rss_after - rss_before) / 1024
    );
    // Values gain digits; no series is added, so the text stays within a few KB.
    assert!(
        metrics_after < metrics_before + 4096,
        "/metrics grew {} bytes",
        metrics_after - metrics_before
    );
    Ok(())
}

/// A request without credentials is answered 401 from its head alone: the body it declares
/// (1 MB, never sent) is not waited for, and the connection is closed.
#[tokio::test]
async fn a_request_without_credentials_is_refused_before_its_body() -> Result<()> {
    let cluster = Cluster::start(1).await?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    for head in [
        "POST /locks/x/lease HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
        "POST /v1beta/AcquireLock HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 1000000\r\n\r\n",
        "POST /admin/v1/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rlk_a_b\r\nContent-Length: 1000000\r\n\r\n",
    ] {
        let started = std::time::Instant::now();
        let (status, closed) = raw_exchange(&cluster.addr(1), head.as_bytes()).await?;
        assert!(status.starts_with("HTTP/1.1 401"), "{head:?}: {status}");
        assert!(closed, "{head:?}: the connection stayed open");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
    Ok(())
}

/// Eight connections that send a request head declaring a 1,000-byte body, with a credential
/// of the right shape, then trickle a byte every 2 s, on a node capped at 8 connections: each
/// is answered 408 and closed within the body-read deadline (10 s), and a normal client is
/// served within 15 s. Before the deadline they held the node for as long as they trickled.
#[tokio::test]
async fn slow_bodies_are_shed_and_a_normal_client_is_served() -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start_with(1, &["--max-connections", "8"]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let head = "POST /locks/slow/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rlk_fake_secret\r\nX-Volcano-Lock-Token: 4f83efc2-8fe7-42e8-8347-43493dc5bd8f\r\nContent-Length: 1000\r\n\r\n{";
    // Then the eight slow bodies hold every client slot of the node. The first is the
    // connection on which the node said it had no other open (a separate connection that
    // measured would still be counted for a moment after it closed, and take a slot).
    let mut first = Some(sole_connection(&cluster).await?);
    let started = std::time::Instant::now();
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut s = match first.take() {
            Some(s) => s,
            None => tokio::net::TcpStream::connect(cluster.addr(1)).await?,
        };
        s.write_all(head.as_bytes()).await?;
        slow.push(tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let mut got = Vec::new();
            loop {
                tokio::select! {
                    read = s.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    },
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {
                        if s.write_all(b" ").await.is_err() {
                            break;
                        }
                    }
                }
            }
            String::from_utf8_lossy(&got)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        }));
    }
    let locks = Locks::new(&cluster, 1, &key);
    let served = raftlock_tests::eventually(
        Duration::from_secs(15),
        "a normal client served",
        || async {
            let r = locks
                .acquire("normal", &raftlock_tests::token(), 30)
                .await
                .ok()?;
            (r.status == 200).then_some(started.elapsed())
        },
    )
    .await?;
    println!("a normal client was served {served:?} after the slow bodies began");
    for task in slow {
        let status = tokio::time::timeout(Duration::from_secs(15), task).await??;
        assert!(
            status.starts_with("HTTP/1.1 408"),
            "a slow body got {status:?}"
        );
    }
    Ok(())
}

/// Sends `head` on a new connection, then (on a task) a space every 2 s while the connection
/// is open; the task answers the first line of the response, once the server has closed the
/// connection, and when that line came (from the head).
async fn trickle(addr: &str, head: &str) -> Result<tokio::task::JoinHandle<(String, Duration)>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(head.as_bytes()).await?;
    let started = std::time::Instant::now();
    Ok(tokio::spawn(async move {
        let mut answered = None;
        let mut buf = [0u8; 1024];
        let mut got = Vec::new();
        loop {
            tokio::select! {
                read = s.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        answered.get_or_insert_with(|| started.elapsed());
                        got.extend_from_slice(&buf[..n]);
                    }
                },
                _ = tokio::time::sleep(Duration::from_secs(2)) => {
                    if s.write_all(b" ").await.is_err() {
                        break;
                    }
                }
            }
        }
        let status = String::from_utf8_lossy(&got)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        (status, answered.unwrap_or_else(|| started.elapsed()))
    }))
}

/// The node-to-node routes read their bodies only from peers: eight connections that send a
/// pre-vote or leader beacon head without the cluster secret, declaring a 1,000-byte body,
/// and trickle it, on a node capped at 8, are each answered `401` from the head at once and
/// closed, and a normal client is served at once. (Before, those routes read the body first,
/// with no deadline: the eight held the node for as long as they trickled.) A peer's body
/// (with the secret) that trickles is cut at the body deadline like any other.
#[tokio::test]
async fn peer_routes_refuse_a_request_without_the_secret_before_its_body() -> Result<()> {
    let cluster = Cluster::start_with(1, &["--max-connections", "8"]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    wait_for_idle_connections(&cluster).await?;
    let started = std::time::Instant::now();
    // The two peer routes that take a body.
    let paths = ["/internal/leader/prevote", "/internal/leader/alive"];
    let mut slow = Vec::new();
    for i in 0..8 {
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
            paths[i % paths.len()]
        );
        slow.push(trickle(&cluster.addr(1), &head).await?);
    }
    // All eight heads are in before the client tries.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let locks = Locks::new(&cluster, 1, &key);
    let served = raftlock_tests::eventually(
        Duration::from_secs(15),
        "a normal client served",
        || async {
            let r = locks
                .acquire("normal", &raftlock_tests::token(), 30)
                .await
                .ok()?;
            (r.status == 200).then_some(started.elapsed())
        },
    )
    .await?;
    println!("a normal client was served {served:?} after the peer-route bodies began");
    for task in slow {
        let (status, at) = tokio::time::timeout(Duration::from_secs(15), task).await??;
        assert!(status.starts_with("HTTP/1.1 401"), "got {status:?}");
        assert!(at < Duration::from_secs(2), "answered after {at:?}");
    }
    assert!(served < Duration::from_secs(3), "served after {served:?}");

    // With the secret but not this cluster's id: refused at once, before the body too.
    let head = format!(
        "POST /internal/leader/prevote HTTP/1.1\r\nHost: x\r\nx-raftlock-cluster-secret: {}\r\nContent-Length: 1000\r\n\r\n{{",
        cluster.secret
    );
    let stranger = trickle(&cluster.addr(1), &head).await?;
    let (status, at) = tokio::time::timeout(Duration::from_secs(15), stranger).await??;
    assert!(status.starts_with("HTTP/1.1 409"), "got {status:?}");
    assert!(at < Duration::from_secs(2), "answered after {at:?}");

    // An admitted peer's body is read — within the deadline, like a client's.
    let view = cluster.view(1).await.context("view")?;
    let cluster_id = view["cluster_id"].as_str().context("cluster id")?;
    let head = format!(
        "POST /internal/leader/prevote HTTP/1.1\r\nHost: x\r\nx-raftlock-cluster-secret: {}\r\nx-raftlock-cluster-id: {cluster_id}\r\nContent-Length: 1000\r\n\r\n{{",
        cluster.secret
    );
    let peer = trickle(&cluster.addr(1), &head).await?;
    let (status, at) = tokio::time::timeout(Duration::from_secs(20), peer).await??;
    println!("a peer's trickled body: {status:?} after {at:?}");
    assert!(status.starts_with("HTTP/1.1 4"), "got {status:?}");
    assert!(
        at >= Duration::from_secs(9) && at < Duration::from_secs(14),
        "answered after {at:?}"
    );
    Ok(())
}

/// Peers are counted apart from clients: connections that present the cluster secret (a
/// follower's pool of forwarding connections, kept open between requests) give their slot
/// back, so twelve of them — more than `--max-connections` 4 and the peers' reserve of 8
/// together — leave every client slot free: a normal client is served at once. (Before,
/// they took the four client slots and the reserve, and a client waited in the accept queue
/// until they idled out.)
#[tokio::test]
async fn peer_connections_take_no_client_slot() -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start_with(1, &["--max-connections", "4"]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let view = cluster.view(1).await.context("view")?;
    let cluster_id = view["cluster_id"]
        .as_str()
        .context("cluster id")?
        .to_string();
    wait_for_idle_connections(&cluster).await?;
    // What a peer sends: the cluster secret and the cluster id.
    let head = format!(
        "GET /readyz HTTP/1.1\r\nHost: x\r\nx-raftlock-cluster-secret: {}\r\nx-raftlock-cluster-id: {cluster_id}\r\n\r\n",
        cluster.secret
    );
    let mut peers = Vec::new();
    for i in 0..12 {
        let mut s = tokio::net::TcpStream::connect(cluster.addr(1)).await?;
        s.write_all(head.as_bytes()).await?;
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .with_context(|| format!("peer connection {i} not served"))??;
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            text.starts_with("HTTP/1.1 200"),
            "peer connection {i}: {text}"
        );
        // Kept open, idle, like a pooled connection.
        peers.push(s);
    }
    let started = std::time::Instant::now();
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(3),
        raw_get(&cluster.addr(1), "/healthz"),
    )
    .await
    .context("a client waited for a slot")??;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let a = Locks::new(&cluster, 1, &key)
        .acquire("normal", &raftlock_tests::token(), 30)
        .await?;
    assert_eq!(a.status, 200);
    println!(
        "with 12 peer connections open, a client was served in {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(peers);
    Ok(())
}

/// Waits until the harness's own keep-alive connections to node 1 have idled out (after the
/// header-read timeout), so a test's connections are the only ones.
/// A connection to node 1 on which the node reports it as its only open client connection
/// (`/metrics` read on it, kept alive), for the caller to go on using.
async fn sole_connection(cluster: &Cluster) -> Result<tokio::net::TcpStream> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let addr = cluster.addr(1);
    let open_on = |addr: String| async move {
        let s = tokio::net::TcpStream::connect(&addr).await.ok()?;
        let mut s = BufReader::new(s);
        s.get_mut()
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .ok()?;
        let mut length = None;
        loop {
            let mut line = String::new();
            s.read_line(&mut line).await.ok()?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse::<usize>().ok();
                }
            }
        }
        let mut body = vec![0u8; length?];
        s.read_exact(&mut body).await.ok()?;
        let open = String::from_utf8_lossy(&body)
            .lines()
            .find_map(|l| l.strip_prefix("raftlock_http_connections "))?
            .trim()
            .parse::<f64>()
            .ok()?;
        // Nothing else is buffered: the stream is handed over between exchanges.
        (open <= 1.0 && s.buffer().is_empty()).then(|| s.into_inner())
    };
    raftlock_tests::eventually(
        Duration::from_secs(20),
        "a connection the node reports as its only one",
        || open_on(addr.clone()),
    )
    .await
}

async fn wait_for_idle_connections(cluster: &Cluster) -> Result<()> {
    raftlock_tests::eventually(
        Duration::from_secs(20),
        "no other open connection",
        || async {
            let (_, metrics) = raw_get(&cluster.addr(1), "/metrics").await.ok()?;
            let open = metrics
                .lines()
                .find_map(|l| l.strip_prefix("raftlock_http_connections "))?
                .trim()
                .parse::<f64>()
                .ok()?;
            (open <= 1.0).then_some(())
        },
    )
    .await?;
    Ok(())
}

/// Connections without credentials cannot take the descriptors a node needs for its own files.
/// Every node starts under `prlimit --nofile=256:1024`: it raises its soft limit to the hard
/// one, and as 1,024 descriptors cannot hold `--max-connections` (8,192) it caps each listener
/// lower and says so (`raftlock_server::open_files`: (1,024 − 512) / 4 = 128 here, with a peer
/// listener). 1,100 idle connections to the leader's client listener — more than its whole
/// limit — then wait in its accept queue: the leader keeps descriptors free, goes on writing
/// its clock hint, logs no "Too many open files", stays the leader, and answers writes
/// forwarded by a follower over its peer listener. Seen failing on the build before: the soft
/// limit stayed 256, and (that check left out) 700 idle connections under 256:512 left a
/// write forwarded to the leader answered 503.
#[tokio::test]
async fn idle_connections_cannot_take_the_open_files_a_node_needs() -> Result<()> {
    const FLOOD: u32 = 1_100;
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if somaxconn < FLOOD {
        eprintln!("net.core.somaxconn is {somaxconn}: the kernel would drop a flood of {FLOOD} connections; skipped");
        return Ok(());
    }
    if !raftlock_tests::installed("prlimit") {
        eprintln!("prlimit (util-linux) not found; skipped");
        return Ok(());
    }
    raise_fd_limit(8192);
    let limited = vec!["prlimit".to_string(), "--nofile=256:1024".to_string()];
    let wrappers = (1..=3).map(|id| (id, limited.clone())).collect();
    let (cluster, _) = Cluster::start_with_peer_listeners_wrapped(3, &[], wrappers).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let pid = cluster.pid(leader).context("the leader's pid")?;
    assert_eq!(soft_open_files(pid)?, 1024, "raised to the hard limit");

    let flooded_at = std::time::SystemTime::now();
    let mut idle = Vec::new();
    for _ in 0..FLOOD {
        idle.push(tokio::net::TcpStream::connect(cluster.addr(leader)).await?);
    }
    let follower = cluster.other_than(&[leader]);
    let locks = Locks::new(&cluster, follower, &key);
    for i in 0..5 {
        let a = locks
            .acquire(&format!("k{i}"), &raftlock_tests::token(), 30)
            .await?;
        assert_eq!(a.status, 200, "a write forwarded to the flooded leader");
    }
    // The clock hint is rewritten every second: once after the flood, with the connections
    // still waiting (they send nothing; the header-read timeout closes them after 10 s).
    cluster
        .wait_for_clock_hint(leader, Some(flooded_at), Duration::from_secs(5))
        .await?;
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    assert!(
        open + 128 < 1024,
        "{open} descriptors open with {FLOOD} idle connections: too few left for the node's own"
    );
    assert_eq!(
        cluster.wait_for_leader(Duration::from_secs(5)).await?,
        leader,
        "the flooded leader kept its leadership"
    );
    // The logs are read below only when they go to the node's log file.
    if std::env::var_os("RAFTLOCK_TEST_LOG").is_some() {
        return Ok(());
    }
    let lines: Vec<String> = cluster.log_lines(leader).iter().map(|l| plain(l)).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("holds fewer client connections") && l.contains(" cap=128 ")),
        "no warning of the lowered cap: {lines:?}"
    );
    for id in cluster.ids() {
        let emfile: Vec<String> = cluster
            .log_lines(id)
            .into_iter()
            .filter(|l| l.contains("Too many open files"))
            .collect();
        assert!(emfile.is_empty(), "node {id}: {emfile:?}");
    }
    drop(idle);
    Ok(())
}

/// `line` without its terminal colour codes (`ESC [ … m`).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// The soft "Max open files" of process `pid`.
fn soft_open_files(pid: u32) -> Result<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .context("no open-files line")?;
    line.split_whitespace()
        .nth(3)
        .context("no soft limit")?
        .parse()
        .context("the soft limit")
}
