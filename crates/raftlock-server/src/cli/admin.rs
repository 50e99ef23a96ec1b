//! `raftlock admin project|key …` and `raftlock cluster status` (platform token).

use clap::{Args, Subcommand, ValueEnum};
use raftlock_client::admin::Project;
use raftlock_client::{KeyKind, ProjectUpdate};
use serde_json::json;

use super::{nanos, table, CmdResult, Conn, Failure};

#[derive(Debug, Args)]
pub struct AdminArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: AdminCmd,
}

#[derive(Debug, Subcommand)]
pub enum AdminCmd {
    /// Projects (tenants).
    #[command(subcommand)]
    Project(ProjectCmd),
    /// Project keys.
    #[command(subcommand)]
    Key(KeyCmd),
    /// Data shards (Raft groups of their own, on some of the nodes).
    #[command(subcommand)]
    Shard(ShardCmd),
}

#[derive(Debug, Subcommand)]
pub enum ShardCmd {
    /// Create a data shard on nodes of the cluster; new projects go to the least-loaded one.
    Create {
        /// Node ids of its voters, e.g. `4,5,6` (1, 3, 5 or 7 nodes).
        #[arg(long, value_delimiter = ',', required = true)]
        members: Vec<u64>,
        /// Do nothing (and succeed) when a data shard on exactly these nodes exists: a
        /// deployment's init step can run it on every start without adding shards.
        #[arg(long)]
        if_absent: bool,
    },
    /// The meta group and every data shard: members, leader, term, projects.
    List,
}

#[derive(Debug, Subcommand)]
pub enum ProjectCmd {
    /// Create a project.
    Create {
        /// Project name.
        name: String,
        /// The shard it lives on for good (default: the least-loaded one).
        #[arg(long)]
        shard: Option<u32>,
    },
    /// List projects.
    List,
    /// Show a project and its keys.
    Get {
        /// Project name.
        name: String,
    },
    /// Change a project's rate limits.
    Update {
        /// Project name.
        name: String,
        /// Project-lock requests per minute (0 = unlimited).
        #[arg(long)]
        lock_ops_per_minute: Option<u32>,
        /// Hierarchical-lock requests per minute (0 = off).
        #[arg(long)]
        hier_ops_per_minute: Option<u32>,
    },
}

/// Key kinds on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Kind {
    /// Full access to the project's locks.
    ServiceRole,
    /// Access by scopes (`locks.manage` for locks).
    Scoped,
    /// Public key, refused by lock endpoints.
    Anon,
}

#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Create a key; its secret is printed once.
    Create {
        /// Project name.
        project: String,
        /// Key kind.
        #[arg(long, value_enum, default_value = "service-role")]
        kind: Kind,
        /// Scope of a scoped key (repeatable), e.g. `locks.manage`.
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
    /// Revoke a key.
    Revoke {
        /// Project name.
        project: String,
        /// Key id.
        key_id: String,
    },
}

#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: ClusterCmd,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Members, leader, term, indexes and each node's /healthz and /readyz.
    Status,
}

fn show_project(p: &Project) -> String {
    let mut s = format!(
        "project {}\n  created at:          {}\n  lock ops per minute: {}\n  hier ops per minute: {}",
        p.name,
        nanos(p.created_at),
        p.lock_ops_per_minute,
        if p.hier_ops_per_minute == 0 {
            "off".to_string()
        } else {
            p.hier_ops_per_minute.to_string()
        }
    );
    for k in &p.keys {
        s.push_str(&format!(
            "\n  key {} {}{}{}",
            k.key_id,
            kind_name(k.kind),
            if k.scopes.is_empty() {
                String::new()
            } else {
                format!(" [{}]", k.scopes.join(","))
            },
            if k.revoked { " (revoked)" } else { "" }
        ));
    }
    s
}

/// The data shards under `cluster status` (nothing for a cluster without one).
fn shard_table(shards: &[raftlock_client::admin::Shard]) -> String {
    if shards.len() <= 1 {
        return String::new();
    }
    format!("\n\n{}", shard_rows(shards))
}

/// Shards as a table: id, members, leader, term, projects, bytes on disk, ops/s.
fn shard_rows(shards: &[raftlock_client::admin::Shard]) -> String {
    let known = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let rows: Vec<Vec<String>> = (shards.iter())
        .map(|s| {
            let members: Vec<String> = s.members.iter().map(u64::to_string).collect();
            vec![
                s.id.to_string(),
                members.join(","),
                known(s.leader),
                known(s.term),
                s.projects.len().to_string(),
                known(s.bytes),
                known(s.ops_per_second),
            ]
        })
        .collect();
    let head = [
        "SHARD", "MEMBERS", "LEADER", "TERM", "PROJECTS", "BYTES", "OPS/S",
    ];
    table(&head, &rows)
}

fn kind_name(k: KeyKind) -> &'static str {
    match k {
        KeyKind::ServiceRole => "service_role",
        KeyKind::Scoped => "scoped",
        KeyKind::Anon => "anon",
    }
}

pub async fn admin(args: AdminArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.admin()?;
    match args.cmd {
        AdminCmd::Project(ProjectCmd::Create { name, shard }) => {
            let p = client.create_project_on(&name, shard).await?;
            conn.show(&p, show_project);
        }
        AdminCmd::Shard(ShardCmd::Create { members, if_absent }) => {
            let members = members.into_iter().collect();
            if if_absent {
                let existing = (client.list_shards().await?.into_iter())
                    .find(|s| s.id != 0 && s.members == members);
                if let Some(s) = existing {
                    conn.emit(&s, || {
                        format!("shard {} on nodes {:?} exists", s.id, s.members)
                    });
                    return Ok(0);
                }
            }
            let s = client.create_shard(&members).await?;
            conn.emit(&s, || {
                format!("created shard {} on nodes {:?}", s.id, s.members)
            });
        }
        AdminCmd::Shard(ShardCmd::List) => {
            let shards = client.shard_status().await?;
            conn.emit(&shards, || shard_rows(&shards));
        }
        AdminCmd::Project(ProjectCmd::List) => {
            let ps = client.list_projects().await?;
            conn.emit(&ps, || {
                let rows: Vec<Vec<String>> = ps
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            p.lock_ops_per_minute.to_string(),
                            p.hier_ops_per_minute.to_string(),
                            p.keys.iter().filter(|k| !k.revoked).count().to_string(),
                            nanos(p.created_at),
                        ]
                    })
                    .collect();
                table(
                    &["PROJECT", "LOCK OPS/MIN", "HIER OPS/MIN", "KEYS", "CREATED"],
                    &rows,
                )
            });
        }
        AdminCmd::Project(ProjectCmd::Get { name }) => {
            let p = client.get_project(&name).await?;
            conn.show(&p, show_project);
        }
        AdminCmd::Project(ProjectCmd::Update {
            name,
            lock_ops_per_minute,
            hier_ops_per_minute,
        }) => {
            if lock_ops_per_minute.is_none() && hier_ops_per_minute.is_none() {
                return Err(Failure::error(
                    "nothing to update: pass --lock-ops-per-minute and/or --hier-ops-per-minute",
                ));
            }
            let update = ProjectUpdate {
                lock_ops_per_minute,
                hier_ops_per_minute,
            };
            let p = client.update_project(&name, update).await?;
            conn.show(&p, show_project);
        }
        AdminCmd::Key(KeyCmd::Create {
            project,
            kind,
            scopes,
        }) => {
            let kind = match kind {
                Kind::ServiceRole => KeyKind::ServiceRole,
                Kind::Scoped => KeyKind::Scoped,
                Kind::Anon => KeyKind::Anon,
            };
            let k = client.create_key(&project, kind, &scopes).await?;
            conn.emit(&k, || {
                format!(
                    "created {} key {} for project {project}\n  secret: {}\n(the secret is shown only once)",
                    kind_name(k.kind),
                    k.key_id,
                    k.secret
                )
            });
        }
        AdminCmd::Key(KeyCmd::Revoke { project, key_id }) => {
            client.revoke_key(&project, &key_id).await?;
            conn.emit(&json!({ "revoked": key_id, "project": project }), || {
                format!("revoked key {key_id} of project {project}")
            });
        }
    }
    Ok(0)
}

pub async fn cluster(args: ClusterArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.admin()?;
    match args.cmd {
        ClusterCmd::Status => {
            let status = client.cluster_status().await?;
            conn.emit(&status, || {
                let leader = status
                    .leader
                    .map(|l| l.to_string())
                    .unwrap_or_else(|| "none".into());
                let rows: Vec<Vec<String>> = status
                    .nodes
                    .iter()
                    .map(|n| {
                        let v = n.view.as_ref();
                        let num = |f: fn(&raftlock_client::ClusterView) -> u64| {
                            v.map(|v| f(v).to_string()).unwrap_or_else(|| "-".into())
                        };
                        vec![
                            n.member.id.to_string(),
                            n.member.addr.clone(),
                            v.map(|v| v.state.clone()).unwrap_or_else(|| "-".into()),
                            if n.member.voter { "voter" } else { "learner" }.into(),
                            num(|v| v.term),
                            num(|v| v.commit_index),
                            num(|v| v.applied_index),
                            v.and_then(|v| v.clock_offset_ms)
                                .map(|o| format!("{o:+}"))
                                .unwrap_or_else(|| "-".into()),
                            if n.healthy { "ok" } else { "down" }.into(),
                            if n.ready {
                                "ready".into()
                            } else {
                                format!("not ready: {}", n.detail)
                            },
                        ]
                    })
                    .collect();
                format!(
                    "leader: {leader}   term: {}   members: {}\n\n{}{}",
                    status.term,
                    status.nodes.len(),
                    table(
                        &[
                            "ID", "ADDR", "ROLE", "VOTER", "TERM", "COMMIT", "APPLIED", "CLOCK_MS",
                            "HEALTHZ", "READYZ"
                        ],
                        &rows
                    ),
                    shard_table(&status.shards)
                )
            });
        }
    }
    Ok(0)
}
