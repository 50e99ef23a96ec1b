//! Nodes replicating over the HTTP network: election, replication, snapshot transfer to a
//! new learner whose log was purged away, and the cluster secret check.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Config, SnapshotPolicy};
use raftlock_core::{Command, Op};
use raftlock_raft::peer_stream::{
    read_frame, write_frame, write_request, Kind, Protocol, Status, STREAM_PATH, STREAM_PROTOCOL,
    STREAM_PROTOCOL_V1,
};
use raftlock_raft::{
    internal_router, open, GroupId, LeaderContact, Network, PeerGroups, Raft, SharedState,
    CLUSTER_SECRET_HEADER, META_GROUP,
};
use tempfile::TempDir;

const SECRET: &str = "cluster-secret";
const TIMEOUT: Option<Duration> = Some(Duration::from_secs(10));

struct TestNode {
    raft: Raft,
    state: SharedState,
    addr: String,
    _dir: TempDir,
    /// The groups its router delivers frames to.
    groups: PeerGroups,
    /// Its network of the meta group; other groups' networks share its stream pool.
    network: Network,
}

/// One more group's replica on `node`, in a directory of its own, reached through the
/// node's one router and stream pool.
async fn host_group(node: &TestNode, id: u64, group: GroupId) -> (Raft, SharedState, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (log, sm) = open(dir.path()).unwrap();
    let state = sm.shared();
    let network = node.network.for_group(group);
    let raft = Raft::new(id, test_config(), network, log, sm)
        .await
        .unwrap();
    node.groups
        .host(group, raft.clone(), LeaderContact::default());
    (raft, state, dir)
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
    let network = Network::new(SECRET);
    let raft = Raft::new(id, test_config(), network.clone(), log, sm)
        .await
        .unwrap();
    let groups = PeerGroups::default();
    groups.host(META_GROUP, raft.clone(), LeaderContact::default());
    let router = internal_router(groups.clone(), SECRET.to_string(), None);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    TestNode {
        raft,
        state,
        addr,
        _dir: dir,
        groups,
        network,
    }
}

async fn leader_of(raft: &Raft) -> u64 {
    raft.wait(TIMEOUT)
        .metrics(|m| m.current_leader.is_some(), "leader elected")
        .await
        .unwrap()
        .current_leader
        .unwrap()
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
    write_request(
        &mut stream,
        Protocol::V2,
        Kind::Vote,
        META_GROUP,
        &[0xff; 4],
    )
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

/// Two Raft groups on the same three nodes, over one router and one stream pool per node:
/// each elects and replicates on its own, a frame for a group a node does not host is
/// answered `NotHosted` on a stream that stays open, and a protocol-1 stream (a node of the
/// release before groups) reaches the meta group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_groups_share_one_transport_and_stay_apart() {
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(id).await);
    }
    let mut shard = BTreeMap::new();
    for (id, node) in &nodes {
        shard.insert(*id, host_group(node, *id, 1).await);
    }
    let members: BTreeMap<u64, BasicNode> = nodes
        .iter()
        .map(|(id, n)| (*id, BasicNode::new(&n.addr)))
        .collect();
    nodes[&1].raft.initialize(members.clone()).await.unwrap();
    shard[&3].0.initialize(members).await.unwrap();

    let meta_leader = nodes[&leader_of(&nodes[&1].raft).await].raft.clone();
    let shard_leader = shard[&leader_of(&shard[&3].0).await].0.clone();
    let meta_write = meta_leader.client_write(create_project("meta-only")).await;
    let shard_write = shard_leader
        .client_write(create_project("shard-only"))
        .await;
    let (meta_index, shard_index) = (
        meta_write.unwrap().log_id.index,
        shard_write.unwrap().log_id.index,
    );
    for (id, node) in &nodes {
        node.raft
            .wait(TIMEOUT)
            .applied_index_at_least(Some(meta_index), "meta replicated")
            .await
            .unwrap();
        let (raft, state, _) = &shard[id];
        raft.wait(TIMEOUT)
            .applied_index_at_least(Some(shard_index), "shard replicated")
            .await
            .unwrap();
        let meta = node.state.read().unwrap();
        let data = state.read().unwrap();
        assert!(meta.machine.project("meta-only").is_some());
        assert!(
            meta.machine.project("shard-only").is_none(),
            "groups stay apart"
        );
        assert!(data.machine.project("shard-only").is_some());
        assert!(
            data.machine.project("meta-only").is_none(),
            "groups stay apart"
        );
    }

    // A node that does not host a group says so, and the stream serves the next frame.
    let client = reqwest::Client::new();
    let url = format!("http://{}{}", nodes[&2].addr, STREAM_PATH);
    let open_stream = |protocol: &'static str| {
        client
            .get(&url)
            .header("connection", "upgrade")
            .header("upgrade", protocol)
            .header(CLUSTER_SECRET_HEADER, SECRET)
            .send()
    };
    let res = open_stream(STREAM_PROTOCOL).await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::SWITCHING_PROTOCOLS);
    let mut stream = tokio::io::BufStream::new(res.upgrade().await.unwrap());
    write_request(&mut stream, Protocol::V2, Kind::Vote, 9, b"anything")
        .await
        .unwrap();
    let (status, body) = read_frame(&mut stream, 1 << 20).await.unwrap();
    assert_eq!(Status::from_tag(status), Some(Status::NotHosted));
    assert!(String::from_utf8_lossy(&body).contains("no replica of group 9"));
    write_request(&mut stream, Protocol::V2, Kind::Vote, 1, &[0xff; 4])
        .await
        .unwrap();
    let (status, _) = read_frame(&mut stream, 1 << 20).await.unwrap();
    assert_eq!(
        Status::from_tag(status),
        Some(Status::Undecodable),
        "still open"
    );

    // Protocol 1: no group in the frame, delivered to the meta group.
    let res = open_stream(STREAM_PROTOCOL_V1).await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::SWITCHING_PROTOCOLS);
    let mut stream = tokio::io::BufStream::new(res.upgrade().await.unwrap());
    let vote = openraft::raft::VoteRequest::<u64>::new(openraft::Vote::new(0, 1), None);
    let body = raftlock_core::codec::encode(&vote).unwrap();
    write_frame(&mut stream, Kind::Vote as u8, &body)
        .await
        .unwrap();
    let (status, body) = read_frame(&mut stream, 1 << 20).await.unwrap();
    assert_eq!(Status::from_tag(status), Some(Status::Answer));
    let answer: Result<openraft::raft::VoteResponse<u64>, raftlock_raft::RaftError> =
        raftlock_core::codec::decode(&body).unwrap();
    let current = nodes[&2].raft.metrics().borrow().vote;
    assert_eq!(
        answer.unwrap().vote,
        current,
        "the meta group's vote answered"
    );

    for (id, node) in &nodes {
        shard[id].0.shutdown().await.unwrap();
        node.raft.shutdown().await.unwrap();
    }
}
