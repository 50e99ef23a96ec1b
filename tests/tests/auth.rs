//! Tenancy: the 401/403 matrix on lock routes and the admin API, and key revocation.

use raftlock_tests::{token, Cluster, Locks};
use serde_json::json;

#[tokio::test]
async fn the_credential_matrix() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let service = cluster.project_key("acme", "service_role", &[]).await?;
    let scoped_ok = cluster
        .project_key("acme", "scoped", &["locks.manage"])
        .await?;
    let scoped_no = cluster
        .project_key("acme", "scoped", &["storage.read"])
        .await?;
    let anon = cluster.project_key("acme", "anon", &[]).await?;
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJl";
    let unknown = "rlk_0123456789abcdef_notarealsecretatall";
    let node = cluster.other_than(&[]);

    let cases: Vec<(&str, Option<&str>, u16, &str)> = vec![
        ("service role", Some(&service), 200, ""),
        ("scoped with locks.manage", Some(&scoped_ok), 200, ""),
        ("missing", None, 401, "unauthorized"),
        ("unknown key", Some(unknown), 401, "unauthorized"),
        ("garbage", Some("hello"), 401, "unauthorized"),
        (
            "scoped without locks.manage",
            Some(&scoped_no),
            403,
            "forbidden",
        ),
        ("anon", Some(&anon), 403, "forbidden"),
        ("auth-user JWT", Some(jwt), 403, "forbidden"),
        ("platform token", Some(&cluster.platform), 403, "forbidden"),
    ];
    for (what, cred, status, code) in cases {
        let mut req = cluster.http.get(cluster.url(node, "/locks/some-key"));
        if let Some(c) = cred {
            req = req.bearer_auth(c);
        }
        let resp = req.send().await?;
        assert_eq!(resp.status().as_u16(), status, "{what}");
        let body: serde_json::Value = resp.json().await?;
        if !code.is_empty() {
            assert_eq!(body["code"], code, "{what}");
            assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }

    // The admin API: platform token only.
    for (cred, status) in [
        (Some(service.as_str()), 403),
        (None, 401),
        (Some(unknown), 401),
        (Some(cluster.platform.as_str()), 200),
    ] {
        let mut req = cluster.http.get(cluster.url(node, "/admin/v1/projects"));
        if let Some(c) = cred {
            req = req.bearer_auth(c);
        }
        assert_eq!(req.send().await?.status().as_u16(), status);
    }
    Ok(())
}

#[tokio::test]
async fn a_revoked_key_stops_working_on_every_node() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let project = "acme";
    let r = cluster
        .admin_post(1, "/admin/v1/projects", json!({ "name": project }))
        .await?;
    assert_eq!(r.status().as_u16(), 201);
    let r = cluster
        .admin_post(
            1,
            "/admin/v1/projects/acme/keys",
            json!({ "kind": "service_role" }),
        )
        .await?;
    assert_eq!(r.status().as_u16(), 201);
    let created: serde_json::Value = r.json().await?;
    let secret = created["secret"].as_str().unwrap().to_string();
    let key_id = created["key_id"].as_str().unwrap().to_string();
    let locks = Locks::new(&cluster, 2, &secret);
    assert_eq!(locks.acquire("k", &token(), 30).await?.status, 200);

    let listed = cluster
        .http
        .get(cluster.url(3, "/admin/v1/projects"))
        .bearer_auth(&cluster.platform)
        .send()
        .await?
        .text()
        .await?;
    assert!(!listed.contains(&secret), "secrets are shown only once");

    let del = cluster
        .http
        .delete(cluster.url(3, &format!("/admin/v1/projects/acme/keys/{key_id}")))
        .bearer_auth(&cluster.platform)
        .send()
        .await?;
    assert_eq!(del.status().as_u16(), 204);
    for node in cluster.ids() {
        assert_eq!(
            locks.on(&cluster, node).read("k").await?.status,
            401,
            "node {node}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn forwarding_requires_the_cluster_secret() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let resp = cluster
        .http
        .get(cluster.url(1, "/locks/k"))
        .header("x-raftlock-hops", "1")
        .send()
        .await?;
    assert_eq!(resp.status().as_u16(), 401);
    let raft = cluster
        .http
        .get(cluster.url(1, "/internal/raft/stream"))
        .body(vec![1, 2, 3])
        .send()
        .await?;
    assert_eq!(
        raft.status().as_u16(),
        401,
        "raft RPCs refuse requests without the secret"
    );
    Ok(())
}
