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
    let cases: Vec<Case> = vec![
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
            &tok,
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
