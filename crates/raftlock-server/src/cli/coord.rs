//! `raftlock wg …` (wait groups) and `raftlock barrier …` (barriers).

use std::time::Duration;

use clap::{Args, Subcommand};
use raftlock_client::coordination::{
    Barrier, BarrierWaitOutcome, JobReport, UpdateBarrierRequest, UpdateWaitGroupRequest,
    WaitGroup, WaitGroupWaitOutcome,
};
use serde_json::json;

use super::hier::{Named, Paging};
use super::{nanos, parse_metadata, CmdResult, Conn, Failure};

#[derive(Debug, Args)]
pub struct WgArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: WgCmd,
}

#[derive(Debug, Subcommand)]
pub enum WgCmd {
    /// Create a wait group.
    Create {
        #[command(flatten)]
        at: Named,
        /// Jobs to wait for.
        #[arg(long)]
        counter: u64,
        /// Seconds from now until it expires (at least 60).
        #[arg(long, default_value_t = 3600)]
        expires_in: u64,
        /// Seconds it is kept after it finishes (60–2592000).
        #[arg(long, default_value_t = 3600)]
        retention: u64,
        /// Metadata entry KEY=VALUE (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
    },
    /// Show a wait group.
    Get(Named),
    /// Update an active wait group: omitted fields keep their value; guarded by its version.
    Update {
        #[command(flatten)]
        at: Named,
        /// New total of jobs (not below those completed).
        #[arg(long)]
        counter: Option<u64>,
        /// New deadline, in seconds from now.
        #[arg(long)]
        expires_in: Option<u64>,
    },
    /// Delete a wait group.
    Delete(Named),
    /// List a namespace's wait groups.
    List {
        /// Namespace.
        namespace: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Report jobs complete (idempotent per job id).
    Complete {
        #[command(flatten)]
        at: Named,
        /// Job ids (1–50).
        #[arg(required = true)]
        jobs: Vec<String>,
    },
    /// List completed jobs.
    Jobs {
        #[command(flatten)]
        at: Named,
        #[command(flatten)]
        paging: Paging,
    },
    /// Wait until the group completes (exit 0) or expires or the timeout passes (exit 75).
    Wait {
        #[command(flatten)]
        at: Named,
        /// Seconds to wait (0–300).
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
}

#[derive(Debug, Args)]
pub struct BarrierArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub cmd: BarrierCmd,
}

#[derive(Debug, Subcommand)]
pub enum BarrierCmd {
    /// Create a barrier.
    Create {
        #[command(flatten)]
        at: Named,
        /// Processes that must arrive.
        #[arg(long)]
        expected: u64,
        /// Seconds without activity before it is deleted (60–2592000).
        #[arg(long, default_value_t = 3600)]
        idle: u64,
    },
    /// Show a barrier.
    Get(Named),
    /// Update a barrier's expected processes (equal to those arrived trips it).
    Update {
        #[command(flatten)]
        at: Named,
        /// New number of expected processes.
        #[arg(long)]
        expected: u64,
    },
    /// Delete a barrier.
    Delete(Named),
    /// List a namespace's barriers.
    List {
        /// Namespace.
        namespace: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Arrive at a generation (default: the current one) and, with --wait, wait for the trip.
    Arrive {
        #[command(flatten)]
        at: Named,
        /// The arriving process.
        #[arg(long)]
        process_id: String,
        /// Generation (default: the barrier's current one).
        #[arg(long)]
        generation: Option<u64>,
        /// Then wait this many seconds for the trip (exit 75 if it does not come).
        #[arg(long)]
        wait: Option<u64>,
    },
    /// Wait until a generation trips (exit 0) or the timeout passes (exit 75).
    Wait {
        #[command(flatten)]
        at: Named,
        /// Generation.
        #[arg(long)]
        generation: u64,
        /// Seconds to wait (0–300).
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// List the processes that arrived in a generation.
    Participants {
        #[command(flatten)]
        at: Named,
        /// Generation.
        #[arg(long)]
        generation: u64,
        #[command(flatten)]
        paging: Paging,
    },
}

fn show_group(g: &WaitGroup) -> String {
    let status = json!(g.status);
    format!(
        "wait group {}: {}, {} of {} jobs\n  version:    {}\n  expires at: {}\n  finished:   {}",
        g.name,
        status
            .as_str()
            .unwrap_or("")
            .trim_start_matches("WAIT_GROUP_STATUS_")
            .to_lowercase(),
        g.completed_jobs,
        g.counter,
        g.version,
        nanos(g.expires_at),
        if g.finished_at == 0 {
            "-".to_string()
        } else {
            nanos(g.finished_at)
        }
    )
}

fn group_row(g: &WaitGroup) -> Vec<String> {
    let done = format!("{}/{}", g.completed_jobs, g.counter);
    let status = json!(g.status).as_str().unwrap_or("").to_string();
    vec![g.name.clone(), done, status]
}

fn barrier_row(b: &Barrier) -> Vec<String> {
    let arrived = format!("{}/{}", b.arrived_processes, b.expected_processes);
    vec![b.name.clone(), b.generation.to_string(), arrived]
}

fn show_barrier(b: &Barrier) -> String {
    format!(
        "barrier {}: generation {}, {} of {} arrived\n  version:       {}\n  last activity: {}",
        b.name,
        b.generation,
        b.arrived_processes,
        b.expected_processes,
        b.version,
        nanos(b.last_activity_at)
    )
}

fn now_plus(secs: u64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now + Duration::from_secs(secs)).as_nanos() as i64
}

pub async fn wg(args: WgArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.client()?;
    match args.cmd {
        WgCmd::Create {
            at: Named { namespace, name },
            counter,
            expires_in,
            retention,
            metadata,
        } => {
            let (expires_at, retention) = (now_plus(expires_in), Duration::from_secs(retention));
            let meta = parse_metadata(&metadata)?;
            let g = client
                .create_wait_group(&namespace, &name, counter, expires_at, retention, meta)
                .await?;
            conn.show(&g, show_group);
        }
        WgCmd::Get(Named { namespace, name }) => {
            conn.show(&client.get_wait_group(&namespace, &name).await?, show_group)
        }
        WgCmd::Update {
            at: Named { namespace, name },
            counter,
            expires_in,
        } => {
            let current = client.get_wait_group(&namespace, &name).await?;
            let req = UpdateWaitGroupRequest {
                namespace_name: namespace,
                wait_group_name: name,
                description: current.description,
                counter: counter.unwrap_or(current.counter),
                expires_at: expires_in.map_or(current.expires_at, now_plus),
                delete_after_finished_seconds: current.delete_after_finished_seconds,
                metadata: current.metadata,
                expected_version: Some(current.version),
            };
            let g = client.update_wait_group(&req).await?;
            conn.show(&g, show_group);
        }
        WgCmd::Delete(Named { namespace, name }) => {
            client.delete_wait_group(&namespace, &name).await?;
            conn.emit_deleted("wait group", &name);
        }
        WgCmd::List { namespace, paging } => {
            let page = client
                .list_wait_groups(&namespace, &paging.request())
                .await?;
            conn.emit_page(&page, &["NAME", "JOBS", "STATUS"], group_row);
        }
        WgCmd::Complete {
            at: Named { namespace, name },
            jobs,
        } => {
            let jobs = (jobs.into_iter())
                .map(|job_id| JobReport {
                    job_id,
                    metadata: Default::default(),
                })
                .collect();
            let g = client.complete_jobs(&namespace, &name, jobs).await?;
            conn.show(&g, show_group);
        }
        WgCmd::Jobs {
            at: Named { namespace, name },
            paging,
        } => {
            let page = client
                .list_completed_jobs(&namespace, &name, &paging.request())
                .await?;
            conn.emit_page(&page, &["JOB", "COMPLETED"], |j| {
                vec![j.job_id.clone(), nanos(j.completed_at)]
            });
        }
        WgCmd::Wait {
            at: Named { namespace, name },
            timeout,
        } => {
            let timeout = Duration::from_secs(timeout);
            let r = client
                .wait_for_wait_group(&namespace, &name, timeout)
                .await?;
            conn.emit(&r, || show_group(&r.wait_group));
            if r.outcome != WaitGroupWaitOutcome::Completed {
                let outcome = json!(r.outcome);
                return Err(Failure::contended(format!(
                    "wait group {name}: {}",
                    outcome.as_str().unwrap_or("")
                )));
            }
        }
    }
    Ok(0)
}

pub async fn barrier(args: BarrierArgs) -> CmdResult {
    let conn = args.conn;
    let client = conn.client()?;
    match args.cmd {
        BarrierCmd::Create {
            at: Named { namespace, name },
            expected,
            idle,
        } => {
            let idle = Duration::from_secs(idle);
            let b = client
                .create_barrier(&namespace, &name, expected, idle, Default::default())
                .await?;
            conn.show(&b, show_barrier);
        }
        BarrierCmd::Get(Named { namespace, name }) => {
            conn.show(&client.get_barrier(&namespace, &name).await?, show_barrier)
        }
        BarrierCmd::Update {
            at: Named { namespace, name },
            expected,
        } => {
            let current = client.get_barrier(&namespace, &name).await?;
            let req = UpdateBarrierRequest {
                namespace_name: namespace,
                barrier_name: name,
                description: current.description,
                expected_processes: expected,
                delete_inactive_after_seconds: current.delete_inactive_after_seconds,
                metadata: current.metadata,
                expected_version: Some(current.version),
            };
            let b = client.update_barrier(&req).await?;
            conn.show(&b, show_barrier);
        }
        BarrierCmd::Delete(Named { namespace, name }) => {
            client.delete_barrier(&namespace, &name).await?;
            conn.emit_deleted("barrier", &name);
        }
        BarrierCmd::List { namespace, paging } => {
            let page = client.list_barriers(&namespace, &paging.request()).await?;
            conn.emit_page(&page, &["NAME", "GENERATION", "ARRIVED"], barrier_row);
        }
        BarrierCmd::Arrive {
            at: Named { namespace, name },
            process_id,
            generation,
            wait,
        } => {
            let generation = match generation {
                Some(g) => g,
                None => client.get_barrier(&namespace, &name).await?.generation,
            };
            let meta = Default::default();
            let r = client
                .arrive_at_barrier(&namespace, &name, &process_id, generation, meta)
                .await?;
            let Some(wait) = wait.filter(|_| !r.all_arrived) else {
                conn.emit(&r, || {
                    format!(
                        "arrived at generation {generation}\n{}",
                        show_barrier(&r.barrier)
                    )
                });
                return Ok(0);
            };
            wait_at(&conn, &client, &namespace, &name, generation, wait).await?;
        }
        BarrierCmd::Wait {
            at: Named { namespace, name },
            generation,
            timeout,
        } => {
            wait_at(&conn, &client, &namespace, &name, generation, timeout).await?;
        }
        BarrierCmd::Participants {
            at: Named { namespace, name },
            generation,
            paging,
        } => {
            let page = client
                .list_barrier_participants(&namespace, &name, generation, &paging.request())
                .await?;
            conn.emit_page(&page, &["PROCESS", "ARRIVED"], |p| {
                vec![p.process_id.clone(), nanos(p.arrived_at)]
            });
        }
    }
    Ok(0)
}

async fn wait_at(
    conn: &Conn,
    client: &raftlock_client::Client,
    namespace: &str,
    name: &str,
    generation: u64,
    timeout: u64,
) -> Result<(), Failure> {
    let timeout = Duration::from_secs(timeout);
    let r = client
        .wait_at_barrier(namespace, name, generation, timeout)
        .await?;
    conn.emit(&r, || show_barrier(&r.barrier));
    if r.outcome != BarrierWaitOutcome::Tripped {
        return Err(Failure::contended(format!(
            "barrier {name}: generation {generation} did not trip in time"
        )));
    }
    Ok(())
}
