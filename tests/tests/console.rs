//! The web console in a real browser: headless Chromium driven through chromedriver (the W3C
//! WebDriver protocol, spoken here with plain HTTP) against a live 3-node cluster.
//!
//! Skipped (with the reason printed) where `chromium` or `chromedriver` is not installed;
//! `.ci/run` installs both.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine;
use raftlock_tests::{eventually, free_port, kill_tree, token, Cluster, Locks};
use serde_json::{json, Value};

/// A chromedriver process and one browser session in it.
struct Browser {
    /// Killing chromedriver alone left each run's chromium running (seen after `make
    /// test`): the session is ended first ([`Drop`]).
    driver: Option<Child>,
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>/session/<id>`
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver starts the browser detached from itself (it is not among the driver's
        // descendants when they are killed): ending the session is what closes it. From a
        // thread of its own, since `drop` cannot wait for a future on the test's runtime.
        let session = self.session.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                reqwest::Client::new()
                    .delete(&session)
                    .timeout(Duration::from_secs(20))
                    .send()
                    .await
                    .ok()
            })
        })
        .join();
        if let Some(driver) = self.driver.take() {
            kill_tree(driver);
        }
    }
}

impl Browser {
    async fn start() -> Result<Browser> {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting chromedriver")?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let base = format!("http://127.0.0.1:{port}");
        eventually(
            Duration::from_secs(20),
            "chromedriver to listen",
            || async {
                http.get(format!("{base}/status"))
                    .send()
                    .await
                    .ok()?
                    .status()
                    .is_success()
                    .then_some(())
            },
        )
        .await?;
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1000"]
            }
        }}});
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await?
            .json()
            .await?;
        let id = created["value"]["sessionId"]
            .as_str()
            .with_context(|| format!("no session: {created}"))?;
        Ok(Browser {
            driver: Some(driver),
            http,
            session: format!("{base}/session/{id}"),
        })
    }

    async fn cmd(&self, method: reqwest::Method, path: &str, body: Value) -> Result<Value> {
        let req = self.http.request(method, format!("{}{path}", self.session));
        let req = if body.is_null() { req } else { req.json(&body) };
        let v: Value = req.send().await?.json().await?;
        if let Some(err) = v["value"].get("error") {
            bail!("webdriver {path}: {err} {}", v["value"]["message"]);
        }
        Ok(v["value"].clone())
    }

    async fn goto(&self, url: &str) -> Result<()> {
        self.cmd(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await
            .map(drop)
    }

    async fn find(&self, css: &str) -> Result<String> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                json!({ "using": "css selector", "value": css }),
            )
            .await?;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(str::to_string)
            .context("no element id")
    }

    async fn type_into(&self, css: &str, text: &str) -> Result<()> {
        let el = self.find(css).await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{el}/value"),
            json!({ "text": text }),
        )
        .await
        .map(drop)
    }

    async fn click(&self, css: &str) -> Result<()> {
        let el = self.find(css).await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{el}/click"),
            json!({}),
        )
        .await
        .map(drop)
    }

    /// The page's current text (what a user reads).
    async fn text(&self) -> Result<String> {
        let body = self.find("body").await?;
        let v = self
            .cmd(
                reqwest::Method::GET,
                &format!("/element/{body}/text"),
                Value::Null,
            )
            .await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    async fn attribute(&self, css: &str, name: &str) -> Result<String> {
        let el = self.find(css).await?;
        let v = self
            .cmd(
                reqwest::Method::GET,
                &format!("/element/{el}/attribute/{name}"),
                Value::Null,
            )
            .await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    async fn accept_alert(&self) -> Result<()> {
        self.cmd(reqwest::Method::POST, "/alert/accept", json!({}))
            .await
            .map(drop)
    }

    async fn screenshot(&self) -> Result<Vec<u8>> {
        let v = self
            .cmd(reqwest::Method::GET, "/screenshot", Value::Null)
            .await?;
        Ok(base64::engine::general_purpose::STANDARD.decode(v.as_str().context("no image")?)?)
    }
}

fn browser_missing() -> Option<String> {
    for tool in ["chromedriver", "chromium"] {
        if !raftlock_tests::installed(tool) {
            return Some(format!(
                "{tool} is not installed (apt-get install chromium chromium-driver)"
            ));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_locks_force_releases_one_and_follows_a_new_leader() -> Result<()> {
    if let Some(why) = browser_missing() {
        println!("SKIPPED the console test: {why}");
        return Ok(());
    }
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let browser = Browser::start().await?;
    // Served by a follower: its calls are forwarded to the leader.
    browser.goto(&cluster.url(follower, "/ui/")).await?;
    browser
        .type_into("#platform-token", &cluster.platform)
        .await?;
    browser.type_into("#project-key", &key).await?;
    browser.click("#save").await?;
    eventually(Duration::from_secs(10), "the cluster view", || async {
        let leader_shown = browser
            .attribute("#leader-badge", "data-leader")
            .await
            .ok()?;
        (leader_shown == leader.to_string()).then_some(())
    })
    .await?;

    // A lock taken by the test appears with its fencing token.
    let locks = Locks::new(&cluster, leader, &key);
    let taken = locks.acquire("ui-job", &token(), 120).await?;
    assert_eq!(taken.status, 200);
    let fencing = taken.fencing().to_string();
    eventually(Duration::from_secs(10), "the lock on the page", || async {
        let page = browser.text().await.ok()?;
        (page.contains("ui-job") && page.contains(&fencing)).then_some(())
    })
    .await?;
    // Hierarchical locks: a holder and a call queued behind it show up, queue included.
    assert_eq!(
        locks
            .rpc("CreateNamespace", json!({ "name": "Reports" }))
            .await?
            .status,
        200
    );
    let mut leases = Vec::new();
    for process in ["builder", "mailer"] {
        let r = locks
            .rpc(
                "CreateLockLease",
                json!({ "namespace_name": "Reports", "process_id": process, "ttl_seconds": 120 }),
            )
            .await?;
        leases.push(
            r.body["lease"]["lease_id"]
                .as_str()
                .context("lease id")?
                .to_string(),
        );
    }
    let held = locks
        .rpc("AcquireLock", json!({ "namespace_name": "Reports", "lock_name": "daily/2026-11-30", "exclusive": true, "lease_id": leases[0] }))
        .await?;
    assert_eq!(held.body["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{held:?}");
    let queued = {
        let (locks, lease) = (locks.clone(), leases[1].clone());
        tokio::spawn(async move {
            locks
                .rpc("AcquireLock", json!({ "namespace_name": "Reports", "lock_name": "daily/2026-11-30", "exclusive": true, "lease_id": lease, "timeout_seconds": 60 }))
                .await
        })
    };
    let waiter = format!("1. {}", &leases[1][..8]);
    eventually(
        Duration::from_secs(10),
        "the holder and the waiter on the page",
        || async {
            let page = browser.text().await.ok()?;
            (page.contains("daily/2026-11-30")
                && page.contains(&leases[0][..8])
                && page.contains(&waiter))
            .then_some(())
        },
    )
    .await?;
    // Semaphores, wait groups and barriers of the namespace show up with their counts.
    let far = ((raftlock_tests::unix_now() + 3600.0) * 1e9) as i64;
    for (method, body) in [
        (
            "CreateSemaphore",
            json!({ "namespace_name": "Reports", "semaphore_name": "smtp", "permits": 4 }),
        ),
        (
            "CreateWaitGroup",
            json!({ "namespace_name": "Reports", "wait_group_name": "nightly", "counter": 12, "expires_at": far, "delete_after_finished_seconds": 600 }),
        ),
        (
            "CompleteJobsFromWaitGroup",
            json!({ "namespace_name": "Reports", "wait_group_name": "nightly", "jobs": [{ "job_id": "a" }, { "job_id": "b" }] }),
        ),
        (
            "CreateBarrier",
            json!({ "namespace_name": "Reports", "barrier_name": "phase", "expected_processes": 5, "delete_inactive_after_seconds": 600 }),
        ),
        (
            "ArriveAtBarrier",
            json!({ "namespace_name": "Reports", "barrier_name": "phase", "process_id": "p1", "expected_generation": 1 }),
        ),
    ] {
        let r = locks.rpc(method, body).await?;
        assert_eq!(r.status, 200, "{method}: {r:?}");
    }
    let sem_lease = locks
        .rpc(
            "CreateSemaphoreLease",
            json!({ "namespace_name": "Reports", "process_id": "mailer", "ttl_seconds": 120 }),
        )
        .await?;
    let sem_lease = sem_lease.body["lease"]["lease_id"]
        .as_str()
        .context("lease id")?
        .to_string();
    let got = locks
        .rpc("AcquireSemaphore", json!({ "namespace_name": "Reports", "semaphore_name": "smtp", "lease_id": sem_lease, "weight": 3 }))
        .await?;
    assert_eq!(got.body["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{got:?}");
    eventually(
        Duration::from_secs(10),
        "the primitives on the page",
        || async {
            let page = browser.text().await.ok()?;
            (page.contains("smtp")
                && page.contains("3 / 4")
                && page.contains("2 / 12")
                && page.contains("1 / 5"))
            .then_some(())
        },
    )
    .await?;
    let shot = browser.screenshot().await?;
    assert!(shot.starts_with(b"\x89PNG"), "a PNG screenshot");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console.png");
    std::fs::write(&out, &shot)?;
    if std::env::var_os("RAFTLOCK_UPDATE_SCREENSHOT").is_some() {
        std::fs::write(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console.png"),
            &shot,
        )?;
    }

    queued.abort();
    // Force release from the page, confirmed in the dialog: gone from the page and free.
    browser.click("button[data-key='ui-job']").await?;
    browser.accept_alert().await?;
    eventually(
        Duration::from_secs(10),
        "the lock gone from the page",
        || async {
            let page = browser.text().await.ok()?;
            (!page.contains("ui-job")).then_some(())
        },
    )
    .await?;
    assert_eq!(locks.read("ui-job").await?.body, json!({ "held": false }));

    // Kill the leader (not the node serving the page): the page shows the new leader.
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    assert_ne!(new_leader, leader);
    eventually(
        Duration::from_secs(15),
        "the new leader on the page",
        || async {
            let shown = browser
                .attribute("#leader-badge", "data-leader")
                .await
                .ok()?;
            (shown == new_leader.to_string()).then_some(())
        },
    )
    .await?;
    // A data shard (a group of one, on the node serving the page) appears with its leader.
    assert!(
        browser.find("[data-shard='0']").await.is_err(),
        "no shard table before a data shard"
    );
    let created = cluster
        .admin_post(
            follower,
            "/admin/v1/shards",
            json!({ "members": [follower] }),
        )
        .await?;
    assert_eq!(created.status().as_u16(), 201);
    let shard = created.json::<Value>().await?["id"].clone();
    eventually(Duration::from_secs(15), "the shard on the page", || async {
        let shown = browser
            .attribute(&format!("[data-shard='{shard}']"), "data-leader")
            .await
            .ok()?;
        (shown == follower.to_string()).then_some(())
    })
    .await?;
    // The page keeps no credential in its URL.
    let url = browser
        .cmd(reqwest::Method::GET, "/url", Value::Null)
        .await?;
    assert!(!url.as_str().unwrap_or_default().contains(&key));
    Ok(())
}

#[tokio::test]
async fn console_assets_carry_a_content_security_policy() -> Result<()> {
    let cluster = Cluster::start(1).await?;
    for path in ["/ui/", "/ui/app.js", "/ui/style.css"] {
        let r = cluster.http.get(cluster.url(1, path)).send().await?;
        assert_eq!(r.status(), 200, "{path}");
        let csp = r.headers()["content-security-policy"].to_str()?;
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{path}: {csp}"
        );
    }
    Ok(())
}
