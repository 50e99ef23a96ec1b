//! The OpenAPI document against a live 3-node cluster: every node serves the committed
//! `docs/openapi.json`, which is valid OpenAPI 3.1; every documented route is served;
//! schemathesis generates ≥ 1,000 requests from it and finds no server error, undocumented
//! status, wrong content type or response that breaks its schema; and a Python client
//! generated from it works.
//!
//! The Python tools live in the virtualenv `RAFTLOCK_PY_VENV` (`make pyenv` makes
//! `target/py-venv` from `tests/python/requirements.txt`; `make integration` sets the
//! variable). Without it these tests fail and say so: they are part of `make test`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use raftlock_tests::Cluster;
use serde_json::Value;

/// Held by every test here for its whole run, so they run one at a time: schemathesis and
/// the generated client are CPU-heavy Python processes, and beside another test's debug-build
/// cluster on a 2-core CI machine they starved it of a stable leader for 15 s (seen twice).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn venv_tool(name: &str) -> Result<PathBuf> {
    let venv = std::env::var("RAFTLOCK_PY_VENV").context(
        "RAFTLOCK_PY_VENV is not set: run `make pyenv` and set it to target/py-venv \
         (`make integration` does both)",
    )?;
    let tool = Path::new(&venv).join("bin").join(name);
    ensure!(
        tool.exists(),
        "{} is missing: run `make pyenv`",
        tool.display()
    );
    Ok(tool)
}

fn committed_document() -> Result<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    std::fs::read_to_string(path).context("reading docs/openapi.json")
}

/// A 3-node cluster with a service-role key whose project has no rate limit in the way.
async fn cluster_with_key() -> Result<(Cluster, String)> {
    let cluster = Cluster::start(3).await?;
    cluster
        .wait_for_leader(std::time::Duration::from_secs(10))
        .await?;
    let key = cluster.project_key("fuzz", "service_role", &[]).await?;
    cluster.lift_rate_limit("fuzz").await?;
    Ok((cluster, key))
}

#[tokio::test]
async fn every_node_serves_the_committed_valid_document() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(3).await?;
    let committed = committed_document()?;
    for id in cluster.ids() {
        let r = cluster
            .http
            .get(cluster.url(id, "/openapi.json"))
            .send()
            .await?;
        ensure!(r.status() == 200, "node {id}: {}", r.status());
        ensure!(
            r.text().await? == committed,
            "node {id} serves a document that differs from docs/openapi.json (run `make openapi`)"
        );
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &committed)?;
    let out = Command::new(venv_tool("openapi-spec-validator")?)
        .arg(&file)
        .output()?;
    ensure!(
        out.status.success(),
        "not valid OpenAPI: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Every path and method of the document reaches a handler: nothing answers the router's
/// own 404, a 405 or the 501 of an unknown method. Admin routes are called with a project
/// key, so they answer 403 and change nothing.
#[tokio::test]
async fn every_documented_route_is_served() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (cluster, key) = cluster_with_key().await?;
    let doc: Value = serde_json::from_str(&committed_document()?)?;
    let paths = doc["paths"].as_object().context("paths")?;
    let mut checked = 0;
    for (template, item) in paths {
        let path = template
            .replace("{key}", "some-key")
            .replace("{name}", "fuzz")
            .replace("{key_id}", "0000000000000000")
            .replace("{id}", "99");
        for method in item.as_object().context("path item")?.keys() {
            let method: reqwest::Method = method.to_uppercase().parse()?;
            let mut request = cluster
                .http
                .request(method.clone(), cluster.url(1, &path))
                .bearer_auth(&key)
                .header("X-Volcano-Lock-Token", uuid::Uuid::new_v4().to_string());
            if method != reqwest::Method::GET && method != reqwest::Method::DELETE {
                request = request.json(&serde_json::json!({}));
            }
            let r = request.send().await?;
            let status = r.status().as_u16();
            let body = r.text().await?;
            let unrouted = (status == 404 && body.contains("no route")) || status == 405;
            if unrouted || status == 501 {
                bail!("{method} {path} is documented but not served: {status} {body}");
            }
            checked += 1;
        }
    }
    ensure!(checked >= 38, "only {checked} operations in the document");
    Ok(())
}

/// Runs schemathesis (`args` after the schema URL); returns the number of generated test
/// cases. Any failure of a check fails the call.
fn schemathesis(schema_url: &str, token: &str, args: &[&str]) -> Result<u64> {
    let workdir = tempfile::tempdir()?;
    let out = Command::new(venv_tool("schemathesis")?)
        .current_dir(workdir.path())
        // The few adjustments for rules that depend on state or the clock (the file says why).
        .env(
            "SCHEMATHESIS_HOOKS",
            concat!(env!("CARGO_MANIFEST_DIR"), "/python/schemathesis_hooks.py"),
        )
        .args(["run", schema_url])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args([
            // Every check, positive_data_acceptance and negative_data_rejection included: the
            // document states every rule the server enforces, and the server enforces every
            // rule it states. Where a rule depends on state or the clock, the hooks file
            // names the adjustment and why.
            "--checks",
            "all",
            "--request-timeout",
            "30",
            "--generation-database",
            "none",
            "--no-color",
        ])
        .args(args)
        .output()
        .context("running schemathesis")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The summary (operations, phases, failures, test cases, seed) ends the output.
    let summary = stdout
        .rfind("SUMMARY")
        .map(|at| &stdout[at..])
        .unwrap_or(&stdout);
    println!("schemathesis {args:?}:\n{summary}");
    if !out.status.success() {
        bail!(
            "schemathesis found problems:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // `N generated, N passed` (and `, N skipped` when some were).
    let generated = summary
        .lines()
        .find(|l| l.contains(" generated, ") && l.contains(" passed"))
        .and_then(|l| l.trim().split(" generated").next())
        .and_then(|n| n.trim().parse().ok())
        .context("no `N generated, N passed` line in the summary")?;
    Ok(generated)
}

#[tokio::test]
async fn schemathesis_finds_no_mismatch() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (cluster, key) = cluster_with_key().await?;
    let schema = cluster.url(1, "/openapi.json");
    // Every operation with a service-role key (through a follower or the leader alike: node 1
    // may be either): the lock APIs for real, the admin API for its 401/403 answers.
    let locks = schemathesis(&schema, &key, &["--max-examples", "50"])?;
    // The admin API with the platform token, without the membership changes and shard
    // creation (they would take the cluster apart or move its leaderships under the fuzzer;
    // tests/tests/membership.rs and tests/tests/shards.rs cover them).
    let admin = schemathesis(
        &schema,
        &cluster.platform,
        &[
            "--include-tag",
            "admin",
            "--exclude-path-regex",
            "cluster/(learners|voters|leader|nodes)|/admin/v1/shards",
            "--max-examples",
            "30",
        ],
    )?;
    println!("schemathesis: {locks} + {admin} generated requests, no failures");
    ensure!(locks + admin >= 2000, "only {} requests", locks + admin);
    // The cluster is still whole and serving after the fuzzing.
    cluster
        .wait_for_leader(std::time::Duration::from_secs(10))
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_generated_python_client_works() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (cluster, key) = cluster_with_key().await?;
    let dir = tempfile::tempdir()?;
    let out = Command::new(venv_tool("openapi-python-client")?)
        .current_dir(dir.path())
        .args(["generate", "--meta", "none", "--path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json"))
        .arg("--output-path")
        .arg(dir.path().join("raftlock_client"))
        .output()
        .context("running openapi-python-client")?;
    ensure!(
        out.status.success(),
        "generating the client failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(venv_tool("python")?)
        .env("PYTHONPATH", dir.path())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/python/generated_client.py"
        ))
        .arg(cluster.url(2, ""))
        .arg(&key)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && stdout.contains("generated python client: ok"),
        "the generated client failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Found by schemathesis: a malformed path parameter got axum's plain-text 400. It is a JSON
/// error with a stable code, like every other refusal, and changes nothing.
#[tokio::test]
async fn malformed_path_parameters_are_json_errors() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(1).await?;
    cluster
        .wait_for_leader(std::time::Duration::from_secs(10))
        .await?;
    for (method, path) in [
        (reqwest::Method::DELETE, "/admin/v1/cluster/nodes/-1"),
        (reqwest::Method::DELETE, "/admin/v1/cluster/nodes/one"),
        (reqwest::Method::GET, "/admin/v1/projects/%FF"),
    ] {
        let r = cluster
            .http
            .request(method.clone(), cluster.url(1, path))
            .bearer_auth(&cluster.platform)
            .send()
            .await?;
        let status = r.status().as_u16();
        let json = r
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let body: Value = r.json().await.unwrap_or(Value::Null);
        ensure!(
            status == 400 && json && body["code"] == "invalid_request",
            "{method} {path}: {status} {body}"
        );
    }
    let view = cluster.view(1).await.context("cluster view")?;
    ensure!(
        view["members"].as_array().map(Vec::len) == Some(1),
        "membership changed: {view}"
    );
    Ok(())
}
