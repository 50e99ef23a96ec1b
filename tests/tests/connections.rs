//! Connections (issue 12): half-open connections neither block other clients nor stay open.
//!
//! Its own test binary on purpose: its 2,000 client sockets take ephemeral ports, which must
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
