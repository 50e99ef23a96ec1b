//! Nodes replicating over the HTTP network: election, replication, snapshot transfer to a
//! new learner whose log was purged away, and the cluster secret check.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Config, SnapshotPolicy};
use raftlock_core::{Command, Op};
use raftlock_raft::peer_stream::{
    read_frame, write_frame, Kind, Status, STREAM_PATH, STREAM_PROTOCOL,
};
use raftlock_raft::{internal_router, open, Network, Raft, SharedState, CLUSTER_SECRET_HEADER};
use tempfile::TempDir;

const SECRET: &str = "cluster-secret";
const TIMEOUT: Option<Duration> = Some(Duration::from_secs(10));

struct TestNode {
    raft: Raft,
    state: SharedState,
    addr: String,
    _dir: TempDir,
}

fn test_config() -> Arc<Config> {
    let config = Config {
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        // Snapshot and purge early, so a new node can only catch up through a snapshot.
        snapshot_policy: SnapshotPolicy::LogsSinceLast(5),
        max_in_snapshot_log_to_keep: 0,
        install_snapshot_timeout: 5_000,
        // Small chunks: exercise a multi-chunk transfer.
        snapshot_max_chunk_size: 64,
        ..Default::default()
    };
    Arc::new(config.validate().unwrap())
}

async fn start_node(id: u64) -> TestNode {
    let dir = tempfile::tempdir().unwrap();
    let (log, sm) = open(dir.path()).unwrap();
    let state = sm.shared();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let raft = Raft::new(id, test_config(), Network::new(SECRET), log, sm)
        .await
        .unwrap();
    let router = internal_router(
        raft.clone(),
        SECRET.to_string(),
        None,
        raftlock_raft::LeaderContact::default(),
    );
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    TestNode {
        raft,
        state,
        addr,
        _dir: dir,
    }
}

fn create_project(name: &str) -> Command {
    Command {
        stamp: 1,
        ops: vec![Op::CreateProject {
            name: name.to_string(),
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_and_a_learner_catches_up_by_snapshot() {
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(id).await);
    }
    let members: BTreeMap<u64, BasicNode> = nodes
        .iter()
        .map(|(id, n)| (*id, BasicNode::new(&n.addr)))
        .collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let leader = nodes[&1]
        .raft
        .wait(TIMEOUT)
        .metrics(|m| m.current_leader.is_some(), "leader elected")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    let leader_raft = nodes[&leader].raft.clone();

    let mut last = 0;
    for i in 0..12 {
        let resp = leader_raft
            .client_write(create_project(&format!("p{i}")))
            .await
            .unwrap();
        assert!(matches!(resp.data[..], [Ok(_)]), "{:?}", resp.data);
        last = resp.log_id.index;
    }
    for node in nodes.values() {
        node.raft
            .wait(TIMEOUT)
            .applied_index_at_least(Some(last), "replicated")
            .await
            .unwrap();
        let data = node.state.read().unwrap();
        assert!(data.machine.project("p0").is_some() && data.machine.project("p11").is_some());
    }
    leader_raft
        .wait(TIMEOUT)
        .metrics(|m| m.purged.is_some(), "leader purged its log")
        .await
        .unwrap();

    // A new node can only be brought up to date with a snapshot now.
    let learner = start_node(4).await;
    leader_raft
        .add_learner(4, BasicNode::new(&learner.addr), true)
        .await
        .unwrap();
    let m = learner
        .raft
        .wait(TIMEOUT)
        .applied_index_at_least(Some(last), "learner caught up")
        .await
        .unwrap();
    assert!(m.snapshot.is_some(), "learner installed a snapshot");
    {
        let data = learner.state.read().unwrap();
        assert!(data.machine.project("p0").is_some() && data.machine.project("p11").is_some());
    }
    leader_raft
        .change_membership(BTreeSet::from([1, 2, 3, 4]), false)
        .await
        .unwrap();
    let resp = leader_raft
        .client_write(create_project("after"))
        .await
        .unwrap();
    learner
        .raft
        .wait(TIMEOUT)
        .applied_index_at_least(Some(resp.log_id.index), "learner follows the log")
        .await
        .unwrap();

    // A peer stream is refused without the right secret or the upgrade, and a frame that
    // does not decode is answered `Undecodable` (then the stream closes).
    let client = reqwest::Client::new();
    let url = format!("http://{}{}", nodes[&1].addr, STREAM_PATH);
    let upgrade = |secret: Option<&str>, protocol: &str| {
        let mut r = client
            .get(&url)
            .header("connection", "upgrade")
            .header("upgrade", protocol);
        if let Some(secret) = secret {
            r = r.header(CLUSTER_SECRET_HEADER, secret);
        }
        r.send()
    };
    let res = upgrade(None, STREAM_PROTOCOL).await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::UNAUTHORIZED);
    let res = upgrade(Some("wrong"), STREAM_PROTOCOL).await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::UNAUTHORIZED);
    let res = upgrade(Some(SECRET), "raftlock-raft/0").await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::BAD_REQUEST);
    let res = upgrade(Some(SECRET), STREAM_PROTOCOL).await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::SWITCHING_PROTOCOLS);
    let mut stream = tokio::io::BufStream::new(res.upgrade().await.unwrap());
    write_frame(&mut stream, Kind::Vote as u8, &[0xff; 4])
        .await
        .unwrap();
    let (status, _) = read_frame(&mut stream, 1 << 20).await.unwrap();
    assert_eq!(Status::from_tag(status), Some(Status::Undecodable));
    assert!(
        read_frame(&mut stream, 1 << 20).await.is_err(),
        "then closed"
    );

    for node in nodes.values().chain([&learner]) {
        node.raft.shutdown().await.unwrap();
    }
}
