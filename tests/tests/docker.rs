//! Real containers: builds the `FROM scratch` image, starts `deploy/docker-compose.yml`,
//! runs load, cuts the leader off its peers with `docker network disconnect`, checks
//! failover and the isolated node's 503, reconnects it and checks that it catches up.
//!
//! Skipped (with the reason printed) where no Docker engine or docker-compose is available.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use raftlock_tests::{binary, eventually, token, Locks};
use serde_json::{json, Value};

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn docker_unavailable() -> Option<String> {
    match Command::new("docker").arg("info").output() {
        Err(e) => return Some(format!("docker CLI not found: {e}")),
        Ok(o) if !o.status.success() => {
            return Some(format!(
                "no Docker engine: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Ok(_) => {}
    }
    match Command::new("docker-compose").arg("version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("docker-compose not found".into()),
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `docker-compose` bound to one project name; `down -v` on drop.
struct Compose {
    project: String,
    env: Vec<(String, String)>,
    /// Extra compose files layered over `deploy/docker-compose.yml` (e.g. the TLS one).
    overrides: Vec<&'static str>,
}

impl Compose {
    /// A project named `prefix` + this process id, running `image` with a fresh platform
    /// token and cluster secret, plus `env` and the compose files in `overrides`.
    fn new(
        prefix: &str,
        image: &Image,
        env: Vec<(String, String)>,
        overrides: Vec<&'static str>,
    ) -> Compose {
        let mut all = vec![
            ("RAFTLOCK_IMAGE".to_string(), image.0.clone()),
            (
                "RAFTLOCK_PLATFORM_TOKEN".into(),
                format!("platform-{}", uuid::Uuid::new_v4()),
            ),
            (
                "RAFTLOCK_CLUSTER_SECRET".into(),
                format!("secret-{}", uuid::Uuid::new_v4()),
            ),
        ];
        all.extend(env);
        Compose {
            project: format!("{prefix}{}", std::process::id()),
            env: all,
            overrides,
        }
    }

    fn platform(&self) -> String {
        let token = self
            .env
            .iter()
            .find(|(k, _)| k == "RAFTLOCK_PLATFORM_TOKEN");
        token.map(|(_, v)| v.clone()).unwrap_or_default()
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("docker-compose");
        for file in
            std::iter::once("deploy/docker-compose.yml").chain(self.overrides.iter().copied())
        {
            c.arg("-f").arg(repo_root().join(file));
        }
        c.args(["-p", &self.project]);
        c.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        c
    }

    fn container(&self, node: u64) -> String {
        format!("{}_node{node}_1", self.project)
    }

    fn cluster_network(&self) -> String {
        format!("{}_cluster", self.project)
    }

    /// The node's address on the `edge` network (reachable from this host).
    fn edge_addr(&self, node: u64) -> Result<String> {
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}_edge\").IPAddress}}}}",
            self.project
        );
        let ip =
            run(Command::new("docker").args(["inspect", "-f", &format, &self.container(node)]))?;
        Ok(format!("{ip}:7001"))
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self.cmd().args(["down", "-v", "--remove-orphans"]).output();
    }
}

/// The `FROM scratch` image of the binary under test, removed again on drop.
struct Image(String);

impl Image {
    fn build(name: &str) -> Result<Image> {
        let tag = format!("raftlock:{name}-{}", std::process::id());
        run(
            Command::new(repo_root().join("deploy/docker/build-image.sh"))
                .arg(binary())
                .arg(&tag),
        )?;
        Ok(Image(tag))
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // `--no-prune`: the tests build their images at the same time from the same steps,
        // so they share the builder's cached layers; pruning this image's untagged parents
        // pulled a layer from under another test's build ("No such image: sha256:…", seen
        // once in CI).
        let _ = run(Command::new("docker").args(["rmi", "-f", "--no-prune", &self.0]));
    }
}

/// Project `acme` and a service-role key for it, through the admin API at `base`.
async fn service_key(http: &reqwest::Client, base: &str, platform: &str) -> Result<String> {
    let r = http
        .post(format!("{base}/admin/v1/projects"))
        .bearer_auth(platform)
        .json(&json!({ "name": "acme" }))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 201);
    let key: Value = http
        .post(format!("{base}/admin/v1/projects/acme/keys"))
        .bearer_auth(platform)
        .json(&json!({ "kind": "service_role" }))
        .send()
        .await?
        .json()
        .await?;
    Ok(key["secret"].as_str().context("key secret")?.to_string())
}

/// An admin `POST path` of `body` at `base`, as a client of the contract sends it: a `503` (no
/// leader known for that moment, e.g. the balancer handing a leadership over right after the
/// data shards appear; docs/semantics.md) is sent again, for up to 15 s. Returns the last
/// status and its JSON body, and whether an earlier attempt answered `503`: an admin write has
/// no request id, so such an attempt may have taken effect (a repeat of a create then answers
/// `409`).
async fn admin_post(
    http: &reqwest::Client,
    base: &str,
    platform: &str,
    path: &str,
    body: &Value,
) -> Result<(u16, Value, bool)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut unknown = false;
    loop {
        let r = http
            .post(format!("{base}{path}"))
            .bearer_auth(platform)
            .json(body)
            .send()
            .await?;
        let status = r.status().as_u16();
        let json: Value = r.json().await.unwrap_or(Value::Null);
        if status != 503 || std::time::Instant::now() > deadline {
            return Ok((status, json, unknown));
        }
        unknown = true;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The JSON answer of the node at `base` (`http(s)://host:port`) to an admin `GET path`.
async fn admin_get(
    http: &reqwest::Client,
    base: &str,
    platform: &str,
    path: &str,
) -> Option<Value> {
    let r = http
        .get(format!("{base}{path}"))
        .bearer_auth(platform)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

/// The cluster view of the node at `base`.
async fn view(http: &reqwest::Client, base: &str, platform: &str) -> Option<Value> {
    admin_get(http, base, platform, "/admin/v1/cluster").await
}

#[tokio::test]
async fn compose_cluster_survives_leader_isolation() -> Result<()> {
    if let Some(why) = docker_unavailable() {
        println!("SKIPPED compose_cluster_survives_leader_isolation: {why}");
        return Ok(());
    }
    let image = Image::build("test")?;
    let compose = Compose::new("rltest", &image, vec![], vec![]);
    let platform = compose.platform();
    run(compose.cmd().args(["up", "-d"]))?;
    let addrs: Vec<String> = (1..=3)
        .map(|n| compose.edge_addr(n))
        .collect::<Result<_>>()?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;

    let leader = eventually(
        Duration::from_secs(60),
        "a leader in the containers",
        || async {
            view(&http, &format!("http://{}", addrs[0]), &platform).await?["leader"].as_u64()
        },
    )
    .await?;
    let base = format!("http://{}", addrs[0]);
    let locks = Locks {
        http: http.clone(),
        base: base.clone(),
        key: service_key(&http, &base, &platform).await?,
    };

    // Load: a batch of held locks through every node.
    let mut held = Vec::new();
    for i in 0..30 {
        let node_locks = Locks {
            base: format!("http://{}", addrs[i % 3]),
            ..locks.clone()
        };
        let t = token();
        let a = node_locks.acquire(&format!("job-{i}"), &t, 300).await?;
        assert_eq!(a.status, 200, "{a:?}");
        held.push((format!("job-{i}"), t, a.fencing()));
    }

    // Cut the leader off its peers (clients still reach it over `edge`).
    let isolated = leader;
    run(Command::new("docker").args([
        "network",
        "disconnect",
        &compose.cluster_network(),
        &compose.container(isolated),
    ]))?;
    let survivor = (1..=3u64).find(|n| *n != isolated).unwrap();
    let survivor_locks = Locks {
        base: format!("http://{}", addrs[survivor as usize - 1]),
        ..locks.clone()
    };
    let new_leader = eventually(
        Duration::from_secs(15),
        "failover to a connected node",
        || async {
            let l = view(
                &http,
                &format!("http://{}", addrs[survivor as usize - 1]),
                &platform,
            )
            .await?["leader"]
                .as_u64()?;
            (l != isolated).then_some(l)
        },
    )
    .await?;
    println!("leader {isolated} isolated; new leader {new_leader}");
    for (name, _, fencing) in &held {
        let r = survivor_locks.read(name).await?;
        assert_eq!(
            (r.status, r.body["fencing_token"].as_u64()),
            (200, Some(*fencing)),
            "{name}"
        );
    }
    let isolated_locks = Locks {
        base: format!("http://{}", addrs[isolated as usize - 1]),
        ..locks.clone()
    };
    let started = std::time::Instant::now();
    let r = isolated_locks.read("job-0").await?;
    assert_eq!(
        (r.status, r.code()),
        (503, "lock_service_unavailable"),
        "isolated node fails closed"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let extra = survivor_locks
        .acquire("after-failover", &token(), 300)
        .await?;
    assert_eq!(extra.status, 200);

    // Heal and check the isolated node catches up and serves the new write.
    run(Command::new("docker").args([
        "network",
        "connect",
        "--alias",
        &format!("node{isolated}.cluster"),
        &compose.cluster_network(),
        &compose.container(isolated),
    ]))?;
    let caught_up = eventually(
        Duration::from_secs(30),
        "the isolated node to catch up",
        || async {
            let r = isolated_locks.read("after-failover").await.ok()?;
            (r.status == 200 && r.body["held"] == true).then_some(r)
        },
    )
    .await?;
    assert_eq!(
        caught_up.body["fencing_token"].as_u64(),
        Some(extra.fencing())
    );
    Ok(())
}

/// The TLS variant for real: `deploy/tls/make-certs.sh compose` and
/// `deploy/docker-compose.tls.yml`. Clients reach the nodes over HTTPS by the names in their
/// certificates; nodes talk mutual TLS on the private network. A lock taken through one node
/// survives `docker kill` of the leader, read over HTTPS through a survivor.
#[tokio::test]
async fn compose_cluster_with_tls_serves_https_and_survives_a_leader_kill() -> Result<()> {
    if let Some(why) = docker_unavailable() {
        println!("SKIPPED compose_cluster_with_tls_serves_https_and_survives_a_leader_kill: {why}");
        return Ok(());
    }
    let image = Image::build("test-tls")?;
    let certs = tempfile::tempdir()?;
    run(Command::new(repo_root().join("deploy/tls/make-certs.sh"))
        .arg("compose")
        .env("RAFTLOCK_BIN", binary())
        .env("OUT", certs.path()))?;
    // The keys are the containers' user's (make-certs.sh chowns them when run as root).
    let compose = Compose::new(
        "rltls",
        &image,
        vec![(
            "RAFTLOCK_TLS_DIR".into(),
            certs.path().display().to_string(),
        )],
        vec!["deploy/docker-compose.tls.yml"],
    );
    let platform = compose.platform();
    run(compose.cmd().args(["up", "-d"]))?;
    // Reach node N as https://nodeN:7001 (a name its certificate carries) at its edge address.
    let mut http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(
            certs.path().join("ca.pem"),
        )?)?);
    for n in 1..=3u64 {
        http = http.resolve(&format!("node{n}"), compose.edge_addr(n)?.parse()?);
    }
    let http = http.build()?;
    let url = |n: u64| format!("https://node{n}:7001");
    let leader = eventually(Duration::from_secs(60), "a leader over HTTPS", || async {
        view(&http, &url(1), &platform).await?["leader"].as_u64()
    })
    .await?;
    let follower = (1..=3u64).find(|n| *n != leader).unwrap();
    let locks = Locks {
        http: http.clone(),
        base: url(follower),
        key: service_key(&http, &url(1), &platform).await?,
    };
    let t = token();
    let taken = locks.acquire("tls-job", &t, 300).await?;
    assert_eq!(taken.status, 200, "{taken:?}");
    // Plaintext to the same port gets nothing.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let edge = compose.edge_addr(follower)?;
    assert!(plain
        .get(format!("http://{edge}/healthz"))
        .send()
        .await
        .is_err());

    run(Command::new("docker").args(["kill", &compose.container(leader)]))?;
    let survivor = (1..=3u64).find(|n| *n != leader).unwrap();
    let new_leader = eventually(
        Duration::from_secs(20),
        "a new leader over mTLS",
        || async {
            let l = view(&http, &url(survivor), &platform).await?["leader"].as_u64()?;
            (l != leader).then_some(l)
        },
    )
    .await?;
    println!("TLS compose: leader {leader} killed, new leader {new_leader}");
    // The survivor may know the new leader a moment before that leader serves (its first
    // entry of the term not yet committed): such a read answers 503, which the contract
    // makes retryable. Any other answer must be the lock as it was taken, and a request
    // that gets no answer fails the test as before.
    let survivor_locks = Locks {
        base: url(survivor),
        ..locks.clone()
    };
    let read = eventually(
        Duration::from_secs(10),
        "an answer other than 503 through the survivor",
        || async {
            match survivor_locks.read("tls-job").await {
                Ok(r) if r.status == 503 => None,
                answered => Some(answered),
            }
        },
    )
    .await??;
    assert_eq!(
        (read.status, read.body["fencing_token"].as_u64()),
        (200, Some(taken.fencing()))
    );
    Ok(())
}

/// The data shards the node at `base` lists, as (id, members, leader), without the meta group.
async fn data_shards(
    http: &reqwest::Client,
    base: &str,
    platform: &str,
) -> Option<Vec<(u64, Vec<u64>, Option<u64>)>> {
    let v = admin_get(http, base, platform, "/admin/v1/shards").await?;
    let shards = v["shards"].as_array()?.iter().filter(|s| s["id"] != 0);
    let shards = shards.map(|s| {
        let members = s["members"].as_array().into_iter().flatten();
        (
            s["id"].as_u64().unwrap_or(0),
            members.filter_map(Value::as_u64).collect(),
            s["leader"].as_u64(),
        )
    });
    Some(shards.collect())
}

/// `deploy/docker-compose.shards.yml` for real: six containers, the init services create two
/// data shards of three (and none more when the stack is started again). A project placed on
/// the shard of nodes 4-6 is served through node 1, which hosts no replica of it, and keeps
/// its lock and fencing token when that shard's leader container is killed.
#[tokio::test]
async fn compose_six_nodes_two_shards_serve_through_any_node_and_survive_a_shard_leader_kill(
) -> Result<()> {
    if let Some(why) = docker_unavailable() {
        println!("SKIPPED compose_six_nodes_two_shards: {why}");
        return Ok(());
    }
    let image = Image::build("test-shards")?;
    let compose = Compose::new(
        "rlshards",
        &image,
        vec![],
        vec!["deploy/docker-compose.shards.yml"],
    );
    let platform = compose.platform();
    run(compose.cmd().args(["up", "-d"]))?;
    let addrs: Vec<String> = (1..=6)
        .map(|n| compose.edge_addr(n).map(|a| format!("http://{a}")))
        .collect::<Result<_>>()?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;

    let shards = eventually(
        Duration::from_secs(90),
        "two data shards from the init services",
        || async {
            let shards = data_shards(&http, &addrs[0], &platform).await?;
            (shards.len() == 2).then_some(shards)
        },
    )
    .await?;
    let mut member_sets: Vec<Vec<u64>> = shards.iter().map(|s| s.1.clone()).collect();
    member_sets.sort();
    assert_eq!(member_sets, vec![vec![1, 2, 3], vec![4, 5, 6]]);
    let far = shards.iter().find(|s| s.1 == [4, 5, 6]).unwrap().0;

    // A project on the shard of nodes 4-6, used through node 1.
    let project = json!({ "name": "acme", "shard": far });
    let (status, body, unknown) =
        admin_post(&http, &addrs[0], &platform, "/admin/v1/projects", &project).await?;
    assert!(
        status == 201 || (unknown && status == 409),
        "{status} {body}"
    );
    let (status, key, _) = admin_post(
        &http,
        &addrs[0],
        &platform,
        "/admin/v1/projects/acme/keys",
        &json!({ "kind": "service_role" }),
    )
    .await?;
    assert_eq!(status, 201, "{key}");
    let through = |n: usize| Locks {
        http: http.clone(),
        base: addrs[n - 1].clone(),
        key: key["secret"].as_str().unwrap_or_default().to_string(),
    };
    let t = token();
    let taken = eventually(Duration::from_secs(30), "an acquire via node 1", || async {
        let a = through(1).acquire("far-job", &t, 300).await.ok()?;
        (a.status == 200).then_some(a)
    })
    .await?;
    for n in 1..=6 {
        let r = through(n).read("far-job").await?;
        assert_eq!(
            (r.status, r.body["fencing_token"].as_u64()),
            (200, Some(taken.fencing())),
            "read through node {n}"
        );
    }

    // Kill the shard's leader: node 1 serves the lock again, and a new acquire's token rises.
    let leader = eventually(
        Duration::from_secs(20),
        "the far shard's leader",
        || async {
            let shards = data_shards(&http, &addrs[3], &platform).await?;
            shards.into_iter().find(|s| s.0 == far)?.2
        },
    )
    .await?;
    assert!((4..=6).contains(&leader), "leader {leader} is a member");
    run(Command::new("docker").args(["kill", &compose.container(leader)]))?;
    let read = eventually(
        Duration::from_secs(20),
        "the lock through node 1 after the kill",
        || async {
            let r = through(1).read("far-job").await.ok()?;
            (r.status == 200).then_some(r)
        },
    )
    .await?;
    assert_eq!(
        read.body["fencing_token"].as_u64(),
        Some(taken.fencing()),
        "the lock is kept"
    );
    let next = through(1).acquire("far-job-2", &token(), 300).await?;
    assert_eq!(next.status, 200, "{next:?}");
    assert!(next.fencing() > taken.fencing(), "tokens keep rising");

    // Starting the stack again runs the init services again: no third shard.
    run(compose.cmd().args(["up", "-d", "shard1", "shard2"]))?;
    for service in ["shard1", "shard2"] {
        let name = format!("{}_{service}_1", compose.project);
        eventually(
            Duration::from_secs(60),
            "the init service to succeed",
            || {
                let state = run(Command::new("docker").args([
                    "inspect",
                    "-f",
                    "{{.State.Status}} {{.State.ExitCode}}",
                    &name,
                ]));
                async move { (state.ok()? == "exited 0").then_some(()) }
            },
        )
        .await?;
    }
    let again = data_shards(&http, &addrs[0], &platform)
        .await
        .context("shards")?;
    assert_eq!(again.len(), 2, "{again:?}");
    Ok(())
}
