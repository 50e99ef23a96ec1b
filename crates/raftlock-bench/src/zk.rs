//! ZooKeeper, the third system of `make bench`, as its users take locks with it.
//!
//! - `zookeeper`: Apache Curator's `InterProcessMutex` recipe. An ephemeral-sequential child
//!   `_c_<uuid>-lock-<seq>` is created under the lock's node (the node is created first, as a
//!   container, when the create finds it absent), then the children are listed: the lowest
//!   holds the lock; any other watches the child just below it and looks again once it goes.
//!   A fresh lock costs four round trips (create → no node, create the node, create, list),
//!   a held one two; release deletes the child and the server reaps the emptied container.
//! - `zookeeper-multi`: the fastest lock ZooKeeper allows, one round trip: the lock's node and
//!   the child created in one `multi` (it succeeds only when the node was absent, so the child
//!   is the only one: held), released by one `multi` deleting both. A hot key is a plain
//!   ephemeral node, retried while it exists (the same spin as the other systems' workload 3).
//!
//! Each benchmark client has its own session, as each Curator process has; sessions are kept
//! alive by the client library's pings, so ZooKeeper has no per-lock renew (workload 4).

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::{Acls, Client, CreateMode, Error, MultiWriteResult};

/// Every path the benchmark writes is below this node (persistent), one child per run.
pub const ROOT: &str = "/bench";

/// A session with the server at `addr`, retried for up to 15 s: a server that is between
/// leaders (an election) refuses sessions for a moment.
pub async fn connect(addr: &str) -> anyhow::Result<Client> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let attempt = Client::builder()
            .with_session_timeout(Duration::from_secs(30))
            .connect(addr)
            .await;
        match attempt {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("connecting to ZooKeeper at {addr}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The server of `endpoints` that leads the ensemble, asked with the `srvr` four-letter word.
pub async fn find_leader(endpoints: &[String], wait: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + wait;
    loop {
        for ep in endpoints {
            if mode(ep).await.is_ok_and(|m| m == "leader") {
                return Ok(ep.clone());
            }
        }
        if Instant::now() >= deadline {
            bail!("no ZooKeeper leader among {endpoints:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn mode(addr: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"srvr").await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    text.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_string())
        .ok_or_else(|| anyhow!("no mode in {text:?}"))
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn ephemeral() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

fn ephemeral_sequential() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::EphemeralSequential.with_acls(Acls::anyone_all())
}

/// Creates `path` and its missing ancestors as persistent nodes.
pub async fn mkdir(zk: &Client, path: &str) -> anyhow::Result<()> {
    zk.mkdir(path, &persistent()).await.map_err(Into::into)
}

/// The sequence number a sequential child ends with (ZooKeeper writes ten digits).
fn sequence(child: &str) -> &str {
    &child[child.len().saturating_sub(10)..]
}

/// Curator's `InterProcessMutex.acquire()` on the lock at `dir`: waits until held and returns
/// the path of this client's child.
pub async fn curator_acquire(zk: &Client, dir: &str) -> anyhow::Result<String> {
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let ours = loop {
        match zk.create(&prefix, b"", &ephemeral_sequential()).await {
            Ok((_, seq)) => break format!("{prefix}{seq}"),
            Err(Error::NoNode) => {
                let container = CreateMode::Container.with_acls(Acls::anyone_all());
                zk.mkdir(dir, &container).await?;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let name = &ours[dir.len() + 1..];
    loop {
        let mut children = zk.list_children(dir).await?;
        children.sort_unstable_by(|a, b| sequence(a).cmp(sequence(b)));
        let at = (children.iter().position(|c| c == name))
            .ok_or_else(|| anyhow!("lock node {ours} vanished"))?;
        if at == 0 {
            return Ok(ours);
        }
        let below = format!("{dir}/{}", children[at - 1]);
        let (stat, watcher) = zk.check_and_watch_stat(&below).await?;
        if stat.is_some() {
            watcher.changed().await;
        }
    }
}

/// Curator's `release()`: deletes this client's child.
pub async fn curator_release(zk: &Client, child: &str) -> anyhow::Result<()> {
    zk.delete(child, None).await.map_err(Into::into)
}

/// One round trip: creates the lock's node at `dir` (its parent must exist) and this client's
/// child in one `multi`; an existing node fails the whole `multi` (the lock is taken).
pub async fn multi_acquire(zk: &Client, dir: &str) -> anyhow::Result<String> {
    let mut writer = zk.new_multi_writer();
    writer.add_create(dir, b"", &persistent())?;
    writer.add_create(&format!("{dir}/lock-"), b"", &ephemeral_sequential())?;
    let results = writer.commit().await?;
    match results.get(1) {
        Some(MultiWriteResult::Create { path, .. }) => Ok(path.clone()),
        other => bail!("multi create answered {other:?}"),
    }
}

/// One round trip: deletes the child and the lock's node in one `multi`.
pub async fn multi_release(zk: &Client, dir: &str, child: &str) -> anyhow::Result<()> {
    let mut writer = zk.new_multi_writer();
    writer.add_delete(child, None)?;
    writer.add_delete(dir, None)?;
    writer.commit().await?;
    Ok(())
}

/// A hot key taken the plain way: an ephemeral node at `path`; false while another holds it.
pub async fn try_ephemeral(zk: &Client, path: &str) -> anyhow::Result<bool> {
    match zk.create(path, b"", &ephemeral()).await {
        Ok(_) => Ok(true),
        Err(Error::NodeExists) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A linearizable read as ZooKeeper offers one: `sync`, then read; true when `path` exists.
pub async fn read(zk: &Client, path: &str) -> anyhow::Result<bool> {
    zk.sync(path).await?;
    match zk.get_data(path).await {
        Ok(_) => Ok(true),
        Err(Error::NoNode) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Holds `count` ephemeral nodes `{dir}/g{j % 100}/l{j}` under one session, created by
/// `clients` concurrent callers on it; returns the session, which must outlive the run.
pub async fn preload(
    addr: &str,
    dir: &str,
    count: usize,
    clients: usize,
) -> anyhow::Result<Client> {
    let holder = connect(addr).await?;
    for g in 0..100 {
        mkdir(&holder, &format!("{dir}/g{g}")).await?;
    }
    let mut tasks = Vec::new();
    for i in 0..clients {
        let zk = holder.clone();
        let dir = dir.to_string();
        tasks.push(tokio::spawn(async move {
            for j in (i..count).step_by(clients) {
                zk.create(&format!("{dir}/g{}/l{j}", j % 100), b"", &ephemeral())
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(holder)
}
