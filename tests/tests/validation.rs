//! Bad input gets a 4xx with a stable code and a message, and changes nothing.

use raftlock_tests::{token, Cluster, Locks};
use reqwest::Method;

/// (what, method, path, headers, body, expected status)
type Case<'a> = (
    &'a str,
    Method,
    String,
    Vec<(&'a str, &'a str)>,
    Option<Vec<u8>>,
    u16,
);

#[tokio::test]
async fn the_validation_matrix() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let locks = Locks::new(&cluster, 1, &key);
    let t = token();
    let tok = [("X-Volcano-Lock-Token", t.as_str())];
    let json = |s: &str| Some(s.as_bytes().to_vec());
    let long_key = "k".repeat(129);
    let huge = Some(vec![b' '; 64 * 1024 + 1]);
    let with_id = |id: &'static str| {
        let mut h = tok.to_vec();
        h.push(("X-Volcano-Request-Id", id));
        h
    };
    let cases: Vec<Case> = vec![
        (
            "empty request id",
            Method::POST,
            "/locks/k/lease".into(),
            with_id(""),
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "request id not a UUID",
            Method::POST,
            "/locks/k/lease".into(),
            with_id("retry-1"),
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "request id without its hyphens",
            Method::POST,
            "/locks/k/lease".into(),
            with_id("6f1c1a2e9d554c1e8a7e3f2b1c0d9e8f"),
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "malformed JSON",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            json("{\"ttl_seconds\":"),
            400,
        ),
        (
            "wrong type",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            json(r#"{"ttl_seconds":"10"}"#),
            400,
        ),
        (
            "negative ttl",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            json(r#"{"ttl_seconds":-5}"#),
            400,
        ),
        (
            "missing ttl",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            json("{}"),
            400,
        ),
        (
            "no body",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            None,
            400,
        ),
        (
            "ttl too small",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            json(r#"{"ttl_seconds":4}"#),
            400,
        ),
        (
            "ttl too big",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            json(r#"{"ttl_seconds":7776001}"#),
            400,
        ),
        (
            "missing token",
            Method::POST,
            "/locks/k/lease".into(),
            vec![],
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "token not a uuid",
            Method::POST,
            "/locks/k/lease".into(),
            vec![("X-Volcano-Lock-Token", "abc")],
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "bad key chars",
            Method::POST,
            "/locks/a%20b/lease".into(),
            tok.to_vec(),
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "key too long",
            Method::POST,
            format!("/locks/{long_key}/lease"),
            tok.to_vec(),
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "renew missing token",
            Method::PATCH,
            "/locks/k/lease".into(),
            vec![],
            json(r#"{"ttl_seconds":10}"#),
            400,
        ),
        (
            "release missing token",
            Method::DELETE,
            "/locks/k/lease".into(),
            vec![],
            None,
            400,
        ),
        (
            "read bad key",
            Method::GET,
            "/locks/a$b".into(),
            vec![],
            None,
            400,
        ),
        (
            "huge body",
            Method::POST,
            "/locks/k/lease".into(),
            tok.to_vec(),
            huge,
            413,
        ),
    ];
    for (what, method, path, headers, body, status) in cases {
        let a = locks.raw(method, &path, &headers, body).await?;
        assert_eq!(a.status, status, "{what}: {a:?}");
        assert!(
            a.body["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: message"
        );
        assert!(a.code() == "invalid_request", "{what}: code {}", a.code());
    }
    // Unknown fields are refused too, with the field named.
    let unknown = locks
        .raw(
            Method::POST,
            "/locks/k/lease",
            &tok,
            json(r#"{"ttl_seconds":10,"color":"blue"}"#),
        )
        .await?;
    assert_eq!(
        (unknown.status, unknown.code()),
        (400, "invalid_request"),
        "{unknown:?}"
    );
    assert!(unknown.body["error"].as_str().unwrap().contains("color"));
    // Malformed paths and wrong methods answer JSON errors as well.
    for (method, path, status) in [
        (Method::GET, "/locks/%FF", 400),
        (Method::GET, "/locks/a/b", 400),
        (Method::PUT, "/locks/k", 405),
    ] {
        let a = locks.raw(method.clone(), path, &[], None).await?;
        assert_eq!(a.status, status, "{method} {path}: {a:?}");
        assert!(
            a.body["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{method} {path}: {a:?}"
        );
    }
    let ok = locks
        .raw(
            Method::POST,
            "/locks/k/lease",
            &with_id("6f1c1a2e-9d55-4c1e-8a7e-3f2b1c0d9e8f"),
            json(r#"{"ttl_seconds":10}"#),
        )
        .await?;
    assert_eq!(ok.status, 200, "{ok:?}");
    // Nothing above changed state: the only lease is the one just taken, with the first token.
    let read = locks.read("k").await?;
    assert_eq!(read.body["fencing_token"].as_u64(), Some(ok.fencing()));
    assert_eq!(
        ok.fencing(),
        (1 << 52) + 1,
        "no earlier request created a lease"
    );
    Ok(())
}

/// The hierarchical API refuses a malformed `X-Volcano-Request-Id` in its own dialect, and
/// the call it came with does not happen.
#[tokio::test]
async fn a_malformed_request_id_is_refused_on_v1beta_and_nothing_is_created() -> anyhow::Result<()>
{
    let cluster = Cluster::start(1).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let locks = Locks::new(&cluster, 1, &key);
    let create = br#"{"name":"Reports"}"#.to_vec();
    for bad in ["", "not-a-uuid"] {
        let a = locks
            .raw(
                Method::POST,
                "/v1beta/CreateNamespace",
                &[("X-Volcano-Request-Id", bad)],
                Some(create.clone()),
            )
            .await?;
        assert_eq!(
            (a.status, a.code()),
            (400, "invalid_argument"),
            "{bad:?}: {a:?}"
        );
    }
    let got = locks
        .rpc("GetNamespace", serde_json::json!({ "name": "Reports" }))
        .await?;
    assert_eq!(got.status, 404, "nothing was created: {got:?}");
    let good = "0b7d5c9e-3a41-4f6b-9c2d-8e1f7a6b5c4d";
    let a = locks
        .raw(
            Method::POST,
            "/v1beta/CreateNamespace",
            &[("X-Volcano-Request-Id", good)],
            Some(create),
        )
        .await?;
    assert_eq!(a.status, 200, "{a:?}");
    Ok(())
}
