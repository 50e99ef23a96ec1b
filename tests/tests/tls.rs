//! TLS on real sockets: HTTPS for clients, mutual TLS between nodes, certificate rotation,
//! and start-up refusals of bad certificate files.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use raftlock_tests::{binary, eventually, token, Cluster, Locks, TlsCerts};

/// Makes the CA and node certificate of one test cluster in `dir`.
fn certs(dir: &std::path::Path) -> Result<TlsCerts> {
    TlsCerts::make(dir, "node", 30)
}

/// A client that trusts only `ca` and presents `identity` (PEM certificate + key), if any.
fn client_with(
    ca: Option<&std::path::Path>,
    identity: Option<&TlsCerts>,
) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .timeout(Duration::from_secs(5));
    if let Some(ca) = ca {
        b = b.add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?);
    }
    if let Some(id) = identity {
        let mut pem = std::fs::read(&id.cert)?;
        pem.extend(std::fs::read(&id.key)?);
        b = b.identity(reqwest::Identity::from_pem(&pem)?);
    }
    Ok(b.build()?)
}

#[tokio::test]
async fn an_https_client_with_the_ca_gets_its_lock_and_others_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = certs(dir.path())?;
    let cluster = Cluster::start_tls(3, &certs, &[]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    // Through a follower too: forwarding to the leader goes over mutual TLS.
    for node in [leader, cluster.other_than(&[leader])] {
        let locks = Locks::new(&cluster, node, &key);
        let got = locks.acquire(&format!("job-{node}"), &token(), 30).await?;
        assert_eq!(got.status, 200, "{:?}", got.body);
    }
    // Without the CA the handshake fails (hostname and chain are verified).
    let stranger = client_with(None, None)?;
    let err = stranger
        .get(cluster.url(leader, "/readyz"))
        .send()
        .await
        .expect_err("a client without the CA must not connect");
    assert!(err.is_connect() || err.is_request(), "{err:?}");
    // Plaintext to the HTTPS port gets no answer.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let url = format!("http://{}/readyz", cluster.addr(leader));
    assert!(plain.get(&url).send().await.is_err(), "plaintext answered");
    // A certificate for another name (the CA signs `node`, whose names are 127.0.0.1 and
    // localhost) is refused when the client dials a name it does not carry.
    let ca_client = client_with(Some(&certs.ca), None)?;
    let port = cluster.addr(leader).rsplit_once(':').unwrap().1.to_string();
    let wrong_name = format!("https://raftlock.invalid:{port}/readyz");
    let resolved = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&certs.ca)?)?)
        .resolve("raftlock.invalid", cluster.addr(leader).parse()?)
        .build()?;
    assert!(
        resolved.get(&wrong_name).send().await.is_err(),
        "hostname not verified"
    );
    assert_eq!(
        ca_client
            .get(cluster.url(leader, "/readyz"))
            .send()
            .await?
            .status(),
        200
    );
    Ok(())
}

#[tokio::test]
async fn the_peer_listener_admits_only_certificates_of_the_peer_ca() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = certs(dir.path())?;
    let other_dir = tempfile::tempdir()?;
    let foreign = TlsCerts::make(other_dir.path(), "node", 30)?;
    let cluster = Cluster::start_tls(3, &certs, &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let peer = cluster.peer_addr(follower).context("peer listener")?;
    let status = format!("https://{peer}/readyz");
    let append = format!("https://{peer}/internal/raft/stream");
    // Our CA and our certificate: admitted (the positive control).
    let member = client_with(Some(&certs.ca), Some(&certs))?;
    assert_eq!(member.get(&status).send().await?.status(), 200);
    // No client certificate, a certificate of another CA, or plaintext: no request gets in,
    // not even to the Raft append route (the cluster secret is never asked for).
    let anonymous = client_with(Some(&certs.ca), None)?;
    let stranger = client_with(Some(&certs.ca), Some(&foreign))?;
    for (who, client) in [("no certificate", &anonymous), ("another CA", &stranger)] {
        for url in [&status, &append] {
            let sent = client
                .post(url)
                .header("x-raftlock-cluster-secret", &cluster.secret)
                .body(vec![0u8; 16])
                .send()
                .await;
            assert!(sent.is_err(), "{who} got an answer from {url}: {sent:?}");
        }
    }
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    assert!(plain
        .get(format!("http://{peer}/readyz"))
        .send()
        .await
        .is_err());
    // The node counted the refused handshakes.
    let refused = cluster
        .metric(follower, "raftlock_tls_handshake_failures_total")
        .await
        .unwrap_or(0.0);
    assert!(refused >= 5.0, "{refused} refused handshakes counted");
    Ok(())
}

/// A node whose peer certificate comes from another CA cannot join: the cluster refuses its
/// handshakes and it refuses theirs, so it never receives the log.
#[tokio::test]
async fn a_node_with_a_certificate_of_another_ca_cannot_join() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = certs(dir.path())?;
    let other_dir = tempfile::tempdir()?;
    let foreign = TlsCerts::make(other_dir.path(), "node", 30)?;
    let cluster = Cluster::start_tls(3, &certs, &[]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    assert_eq!(
        Locks::new(&cluster, 1, &key)
            .acquire("j", &token(), 30)
            .await?
            .status,
        200
    );
    let (addr, peer_addr) = (free_addr(), free_addr());
    let data = tempfile::tempdir()?;
    let mut child = std::process::Command::new(binary())
        .args([
            "serve",
            "--node-id",
            "4",
            "--join",
            "--listen",
            &addr,
            "--peer-listen",
            &peer_addr,
        ])
        .args(["--peers", &format!("4={peer_addr}")])
        .arg("--data-dir")
        .arg(data.path())
        .args([
            "--cluster-secret",
            &cluster.secret,
            "--platform-token",
            &cluster.platform,
        ])
        .args(foreign.serve_args())
        .env("RAFTLOCK_LOG", "off")
        .stdin(std::process::Stdio::null())
        .spawn()?;
    let result = async {
        let outsider = foreign.client()?;
        let platform = cluster.platform.clone();
        let metric = |name: &'static str| metric_of(&outsider, &addr, &platform, name);
        let health = format!("https://{addr}/healthz");
        eventually(Duration::from_secs(10), "node 4 listening", || async {
            let r = outsider.get(&health).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await?;
        // Ask the cluster to add it; the leader then tries (and fails) to replicate to it.
        let _ = cluster
            .admin_post(
                1,
                "/admin/v1/cluster/learners",
                serde_json::json!({ "node_id": 4, "addr": peer_addr }),
            )
            .await;
        let refused = eventually(
            Duration::from_secs(10),
            "node 4 refusing the cluster",
            || async {
                let n = metric("raftlock_tls_handshake_failures_total").await?;
                (n >= 3.0).then_some(n)
            },
        )
        .await?;
        let got = metric("raftlock_raft_last_log_index").await.unwrap_or(0.0);
        anyhow::ensure!(
            got == 0.0,
            "node 4 received log entries up to {got} ({refused} handshakes refused)"
        );
        Ok(())
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// The value of metric `name` on the node at `addr`, through `client`.
async fn metric_of(client: &reqwest::Client, addr: &str, token: &str, name: &str) -> Option<f64> {
    let url = format!("https://{addr}/metrics");
    let text = client
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse::<f64>().ok())
}

fn free_addr() -> String {
    format!("127.0.0.1:{}", raftlock_tests::free_port())
}

/// Under load: the leader is killed, then every node's certificate is replaced by a new one
/// (same CA), which nodes pick up without a restart. No request fails after the rotation,
/// and new connections get the new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_peer_mtls_survives_a_leader_kill_and_a_rotation_under_load() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = certs(dir.path())?;
    let mut cluster = Cluster::start_tls(3, &certs, &[]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    let endpoints: Vec<String> = cluster
        .ids()
        .iter()
        .map(|id| cluster.url(*id, ""))
        .collect();
    let sdk = raftlock_client::Client::builder()
        .endpoints(endpoints)
        .token(&key)
        .ca_cert_pem(std::fs::read(&certs.ca)?)
        .build()?;
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let phase = Arc::new(AtomicU64::new(0)); // 0 before rotation, 1 after
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (sdk, done, failed, phase, stop) = (
                sdk.clone(),
                done.clone(),
                failed.clone(),
                phase.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let name = format!("rot-{w}");
                while !stop.load(Ordering::Relaxed) {
                    let result = async {
                        let t = raftlock_client::LockToken::new();
                        sdk.acquire(&name, t, Duration::from_secs(30)).await?;
                        sdk.release(&name, t).await
                    }
                    .await;
                    match result {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if phase.load(Ordering::Relaxed) == 1 => {
                            failed.lock().unwrap().push(format!("{e}"))
                        }
                        Err(_) => {}
                    }
                }
            })
        })
        .collect();
    let progressed = |n: u64| {
        let done = done.clone();
        async move {
            eventually(Duration::from_secs(15), "requests succeeding", || async {
                (done.load(Ordering::Relaxed) >= n).then_some(())
            })
            .await
        }
    };
    progressed(20).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    cluster.kill(leader);
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    cluster.restart(leader)?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    progressed(done.load(Ordering::Relaxed) + 20).await?;

    // Rotation: new key pair and certificate for every node, written in place.
    let before = std::fs::read(&certs.cert)?;
    TlsCerts::make(&certs.dir, "node", 30)?;
    assert_ne!(std::fs::read(&certs.cert)?, before, "certificate replaced");
    for id in cluster.ids() {
        eventually(
            Duration::from_secs(15),
            "every node reloading its certificates",
            || async {
                // Client listener, peer listener and peer client: three reloads per node.
                let n = cluster.metric(id, "raftlock_tls_reloads_total").await?;
                (n >= 3.0).then_some(())
            },
        )
        .await?;
    }
    phase.store(1, Ordering::Relaxed);
    let after_rotation = done.load(Ordering::Relaxed);
    progressed(after_rotation + 50).await?;
    // A new connection gets the new certificate.
    let fresh = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&certs.ca)?)?)
        .tls_info(true)
        .build()?;
    for id in cluster.ids() {
        let resp = fresh.get(cluster.url(id, "/readyz")).send().await?;
        let info = resp
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .context("TLS info")?;
        let presented = info.peer_certificate().context("peer certificate")?;
        assert_eq!(
            presented,
            pem_der(&std::fs::read(&certs.cert)?)?,
            "node {id}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await?;
    }
    let failed = failed.lock().unwrap().clone();
    println!(
        "{} acquire/release cycles; {} after the rotation; failures after it: {failed:?}",
        done.load(Ordering::Relaxed),
        done.load(Ordering::Relaxed) - after_rotation
    );
    assert!(
        failed.is_empty(),
        "requests failed after the rotation: {failed:?}"
    );
    Ok(())
}

/// The DER bytes of the first certificate in a PEM file.
fn pem_der(pem: &[u8]) -> Result<Vec<u8>> {
    let text = std::str::from_utf8(pem)?;
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    use base64::Engine;
    Ok(base64::engine::general_purpose::STANDARD.decode(body)?)
}

#[tokio::test]
async fn a_rotation_to_a_bad_file_keeps_the_old_certificate() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = certs(dir.path())?;
    let cluster = Cluster::start_tls(1, &certs, &[]).await?;
    let good = std::fs::read(&certs.cert)?;
    std::fs::write(&certs.cert, b"-----BEGIN CERTIFICATE-----\nnot base64\n")?;
    eventually(
        Duration::from_secs(15),
        "the node noticing the bad file",
        || async {
            let n = cluster
                .metric(1, "raftlock_tls_reload_failures_total")
                .await?;
            (n >= 1.0).then_some(())
        },
    )
    .await?;
    // New connections still get the old certificate.
    let fresh = certs.client()?;
    assert_eq!(
        fresh.get(cluster.url(1, "/readyz")).send().await?.status(),
        200
    );
    std::fs::write(&certs.cert, good)?;
    Ok(())
}

/// JavaScript clients (Node's `fetch`, as the Volcano JS SDK uses) trust a cluster CA through
/// `NODE_EXTRA_CA_CERTS` and get their lock over HTTPS; without it the handshake fails.
#[tokio::test]
async fn node_fetch_gets_a_lock_over_https_with_node_extra_ca_certs() -> Result<()> {
    if !raftlock_tests::installed("node") {
        println!("SKIPPED: node is not installed (.ci/run installs it)");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let certs = certs(dir.path())?;
    let cluster = Cluster::start_tls(1, &certs, &[]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let script = r#"
        const [url, key] = process.argv.slice(1);
        fetch(url, {
            method: "POST",
            headers: {
                Authorization: `Bearer ${key}`,
                "X-Volcano-Lock-Token": crypto.randomUUID(),
                "Content-Type": "application/json",
            },
            body: JSON.stringify({ ttl_seconds: 10 }),
        })
            .then(async (r) => console.log(r.status, JSON.stringify(await r.json())))
            .catch((e) => { console.log("failed", e.cause?.code ?? e.message); process.exit(3); });
    "#;
    let url = cluster.url(1, "/locks/js-job/lease");
    let run = |extra_ca: Option<&std::path::Path>| {
        let mut cmd = tokio::process::Command::new("node");
        cmd.args(["-e", script, &url, &key])
            .env_remove("NODE_EXTRA_CA_CERTS");
        if let Some(ca) = extra_ca {
            cmd.env("NODE_EXTRA_CA_CERTS", ca);
        }
        cmd.output()
    };
    let trusted = run(Some(&certs.ca)).await?;
    let out = String::from_utf8_lossy(&trusted.stdout);
    assert!(
        out.starts_with("200 ") && out.contains("fencing_token"),
        "{out}"
    );
    let untrusted = run(None).await?;
    let out = String::from_utf8_lossy(&untrusted.stdout);
    assert!(
        !untrusted.status.success() && out.starts_with("failed"),
        "{out}"
    );
    Ok(())
}

/// Bad certificate files stop the node at start with one line naming the file.
#[test]
fn bad_certificate_files_stop_the_node_with_a_line_naming_the_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = TlsCerts::make(dir.path(), "node", 30)?;
    let other = TlsCerts::make(dir.path(), "other", 30)?;
    let expired_dir = tempfile::tempdir()?;
    let expired = TlsCerts::make(expired_dir.path(), "old", 0)?;
    let missing = dir.path().join("missing.pem");
    let cases: Vec<(&str, Vec<String>, String)> = vec![
        (
            "missing file",
            vec![
                "--tls-cert".into(),
                missing.display().to_string(),
                "--tls-key".into(),
                certs.key.display().to_string(),
            ],
            missing.display().to_string(),
        ),
        (
            "key of another certificate",
            vec![
                "--tls-cert".into(),
                certs.cert.display().to_string(),
                "--tls-key".into(),
                other.key.display().to_string(),
            ],
            certs.cert.display().to_string(),
        ),
        (
            "expired certificate",
            vec![
                "--tls-cert".into(),
                expired.cert.display().to_string(),
                "--tls-key".into(),
                expired.key.display().to_string(),
            ],
            expired.cert.display().to_string(),
        ),
        (
            "not a CA file",
            vec![
                "--peer-listen".into(),
                "127.0.0.1:0".into(),
                "--peer-tls-cert".into(),
                certs.cert.display().to_string(),
                "--peer-tls-key".into(),
                certs.key.display().to_string(),
                "--peer-ca".into(),
                certs.key.display().to_string(),
            ],
            certs.key.display().to_string(),
        ),
    ];
    for (what, args, names) in cases {
        let data = tempfile::tempdir()?;
        let out = std::process::Command::new(binary())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--cluster-secret",
                "s",
                "--platform-token",
                "t",
            ])
            .arg("--data-dir")
            .arg(data.path())
            .args(&args)
            .env("RAFTLOCK_LOG", "off")
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: the node started");
        assert!(
            stderr.contains(&names),
            "{what}: {stderr:?} does not name {names}"
        );
        assert!(stderr.trim().lines().count() <= 3, "{what}: {stderr}");
    }
    Ok(())
}
