//! `raftlock-bench`: the load generator of `make bench`.
//!
//! - `run`: drives one system (raftlock, etcd, or ZooKeeper with either lock recipe, see
//!   `zk`) through the workloads at each concurrency and appends one JSON line per cell to
//!   the results file.
//! - `load`: holds N project locks (memory and recovery measurement).
//! - `report`: turns the results into the table of `docs/benchmarks.md` and an SVG plot.
//! - `stall`: latency of a steady load while snapshots of many held locks are built.
//! - `soak`: a fixed-rate mixed load for many minutes, reported minute by minute (`make soak`).
//! - `primitives`: a hot semaphore, wait-group job completions and a 16-party barrier
//!   (`make bench-primitives`).
//!
//! The scripts beside `src/` drive it: `run.sh` (`make bench`), `soak.sh` (`make soak`),
//! `cost.sh` (`make bench-cost`) and `primitives.sh` (`make bench-primitives`), which start
//! and stop their local clusters and write into docs/benchmarks.md through `cluster.sh`;
//! `scaleout.sh` (`make bench-scaleout`) and `ab.sh` (`make bench-ab`: this build against
//! another, two capped clusters loaded at the same time) print their tables.

mod conn;
mod primitives;
mod report;
mod scaleout;
mod soak;
mod stall;
mod systems;
mod workloads;
mod zk;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Parser, Subcommand};

use systems::{find_leader, raftlock_project, System, Target};
use workloads::Ctx;

#[derive(Parser)]
#[command(
    name = "raftlock-bench",
    about = "raftlock vs etcd and ZooKeeper load generator"
)]
struct Cli {
    /// Tokio worker threads of the load generator (1 = a single-threaded runtime).
    #[arg(long, default_value_t = 1, global = true)]
    threads: usize,
    /// Speak HTTPS to the servers, trusting this PEM CA certificate (raftlock with
    /// --tls-cert); measures what TLS costs.
    #[arg(long, global = true)]
    cacert: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run workloads against one system and append results (JSON lines).
    Run {
        #[arg(long, value_enum)]
        system: System,
        /// Client endpoints `host:port,...` (raftlock: in node-id order 1, 2, 3).
        #[arg(long, value_delimiter = ',')]
        endpoints: Vec<String>,
        /// raftlock platform token (creates the benchmark project and key).
        #[arg(long, default_value = "")]
        platform_token: String,
        /// Workloads: 1, 2, 3, 3h, 4, 5, 6.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,3h,4,5,6")]
        workloads: Vec<String>,
        #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
        clients: Vec<usize>,
        /// Measured seconds per cell.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Discarded seconds at the start of each cell.
        #[arg(long, default_value_t = 1.0)]
        warmup: f64,
        /// Locks held in the namespace for workload 6.
        #[arg(long, default_value_t = 100_000)]
        held: usize,
        #[arg(long, default_value_t = 1)]
        round: u32,
        #[arg(long)]
        out: Option<PathBuf>,
        /// The system's server process ids, whose CPU time per operation each cell reports.
        #[arg(long, value_delimiter = ',')]
        server_pids: Vec<u32>,
    },
    /// One cell of project-lock writes spread over the cluster's data shards, each client
    /// talking to its shard's leader (`make bench-scaleout`); prints it as a tab-separated
    /// line: label, ops/s, p50 ms, p99 ms, errors.
    Scaleout {
        #[arg(long, value_delimiter = ',')]
        endpoints: Vec<String>,
        #[arg(long)]
        platform_token: String,
        /// The cluster's name in the output (e.g. "3 shards").
        #[arg(long)]
        label: String,
        /// Workload 1 (acquire fresh keys) or 2 (acquire+release cycle).
        #[arg(long, default_value = "1")]
        workload: String,
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, default_value_t = 2.0)]
        warmup: f64,
        #[arg(long, default_value_t = 1)]
        round: u32,
    },
    /// Hold N project locks on a raftlock cluster (long TTL), as fast as possible.
    Load {
        #[arg(long, value_delimiter = ',')]
        endpoints: Vec<String>,
        #[arg(long)]
        platform_token: String,
        #[arg(long, default_value_t = 1_000_000)]
        locks: usize,
        #[arg(long, default_value_t = 256)]
        clients: usize,
        #[arg(long, default_value_t = 86_400)]
        ttl: u64,
    },
    /// Latency of a read/acquire/release load while the leader builds snapshots, on a cluster
    /// already holding `held` locks (`load`'s `mem-*`, key on `load`'s stdout).
    Stall {
        #[arg(long, value_delimiter = ',')]
        endpoints: Vec<String>,
        #[arg(long)]
        key: String,
        #[arg(long, default_value_t = 1_000_000)]
        held: usize,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        #[arg(long, default_value_t = 20.0)]
        seconds: f64,
    },
    /// Aggregate results into a markdown table (between markers of `--md`) and an SVG plot.
    Soak {
        #[arg(long, value_delimiter = ',')]
        endpoints: Vec<String>,
        #[arg(long)]
        platform_token: String,
        /// Jobs per second (a project job is 3 requests, a hierarchical one 2).
        #[arg(long, default_value_t = 1000.0)]
        rate: f64,
        #[arg(long, default_value_t = 30)]
        minutes: usize,
        /// Minutes run first at the same rate and not reported (see `soak::Plan`).
        #[arg(long, default_value_t = 1)]
        warmup_minutes: usize,
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// The nodes' process ids, in `endpoints` order, for their RSS.
        #[arg(long, value_delimiter = ',')]
        pids: Vec<u32>,
        /// Write the minutes as a markdown table here.
        #[arg(long)]
        md: Option<PathBuf>,
        /// The system under load: raftlock, or etcd with the same jobs on the same disk.
        #[arg(long, value_enum, default_value_t = System::Raftlock)]
        system: System,
    },
    /// Grackle's other primitives: a hot semaphore, wait-group job completions, a 16-party
    /// barrier; prints a markdown table.
    Primitives {
        #[arg(long, value_delimiter = ',')]
        endpoints: Vec<String>,
        #[arg(long)]
        platform_token: String,
        /// Measured seconds per semaphore and wait-group line.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Barrier rounds.
        #[arg(long, default_value_t = 200)]
        rounds: u64,
        /// Write the table here too.
        #[arg(long)]
        md: Option<PathBuf>,
    },
    /// Plots a soak's minutes (the markdown table `soak --md` wrote): p50, p99, p99.9 and max
    /// per minute, against the goal lines (p99 10 ms, max 100 ms).
    SoakPlot {
        #[arg(long)]
        table: PathBuf,
        #[arg(long)]
        svg: PathBuf,
        #[arg(long)]
        title: String,
    },
    Report {
        #[arg(long)]
        results: PathBuf,
        #[arg(long)]
        md: PathBuf,
        #[arg(long)]
        svg: PathBuf,
        /// Markdown inserted before the table (command, machine).
        #[arg(long)]
        header: Option<PathBuf>,
        /// Markdown inserted after the table (memory and recovery).
        #[arg(long)]
        footer: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(ca) = &cli.cacert {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        conn::use_tls(&pem)?;
    }
    let rt = if cli.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads)
            .enable_all()
            .build()?
    };
    rt.block_on(async_main(cli.cmd))
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn setup_conn(s: &primitives::Setup) -> conn::Conn {
    conn::Conn::new(&s.leader, Some(&s.key))
}

async fn async_main(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Run {
            system,
            endpoints,
            platform_token,
            workloads,
            clients,
            seconds,
            warmup,
            held,
            round,
            out,
            server_pids,
        } => {
            let leader = find_leader(system, &endpoints, Duration::from_secs(30)).await?;
            let run_id = format!("r{round}-{}", unix_secs());
            let key = match system {
                System::Raftlock => Some(
                    raftlock_project(&leader, &platform_token, &format!("bench-{run_id}")).await?,
                ),
                System::Etcd | System::Zookeeper | System::ZookeeperMulti => None,
            };
            let ctx = Arc::new(Ctx {
                target: Target {
                    system,
                    leader: leader.clone(),
                    key,
                },
                round,
                warmup: Duration::from_secs_f64(warmup),
                measure: Duration::from_secs_f64(seconds),
                ns6: format!("{run_id}-w6"),
                run_id,
                spread: Vec::new(),
                server_pids,
                zk_holder: Default::default(),
            });
            workloads::setup(&ctx).await?;
            eprintln!("{} leader {leader}, round {round}", system.name());
            let mut file = match &out {
                Some(p) => Some(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(p)
                        .with_context(|| format!("opening {}", p.display()))?,
                ),
                None => None,
            };
            for w in workloads::ALL
                .iter()
                .filter(|w| workloads.iter().any(|x| x == *w))
            {
                if !workloads::runs_on(w, system) {
                    continue;
                }
                if *w == "6" {
                    workloads::preload(&ctx, held, 64).await?;
                }
                for c in workloads::levels(w, &clients) {
                    let cell = workloads::run_cell(ctx.clone(), w, c).await?;
                    eprintln!(
                        "  w{:<2} {:>3} clients: {:>9.0} {:<11} p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  errors {}",
                        cell.workload,
                        cell.clients,
                        cell.throughput,
                        workloads::unit(w),
                        cell.p50_ms,
                        cell.p99_ms,
                        cell.p999_ms,
                        cell.errors
                    );
                    if let Some(f) = file.as_mut() {
                        writeln!(f, "{}", serde_json::to_string(&cell)?)?;
                    }
                }
            }
            Ok(())
        }
        Cmd::Primitives {
            endpoints,
            platform_token,
            seconds,
            rounds,
            md,
        } => {
            let leader = find_leader(System::Raftlock, &endpoints, Duration::from_secs(30)).await?;
            let run = format!("prims-{}", unix_secs());
            let key = raftlock_project(&leader, &platform_token, &run).await?;
            let setup = primitives::Setup {
                leader,
                key,
                namespace: run,
                seconds,
            };
            let mut c = setup_conn(&setup);
            systems::hier_namespace(&mut c, &setup.namespace).await?;
            let mut lines = Vec::new();
            for (permits, clients) in [(8, 8), (8, 64)] {
                lines.push(primitives::hot_semaphore(&setup, permits, clients).await?);
                eprintln!("{}", lines.last().unwrap().row());
            }
            for clients in [1, 64] {
                lines.push(primitives::wait_group_jobs(&setup, clients).await?);
                eprintln!("{}", lines.last().unwrap().row());
            }
            lines.push(primitives::barrier_rounds(&setup, 16, rounds).await?);
            eprintln!("{}", lines.last().unwrap().row());
            let table = primitives::table(&lines);
            print!("{table}");
            if let Some(path) = md {
                std::fs::write(&path, &table)?;
            }
            Ok(())
        }
        Cmd::Scaleout {
            endpoints,
            platform_token,
            label,
            workload,
            clients,
            seconds,
            warmup,
            round,
        } => {
            let w = match workload.as_str() {
                "1" => "1",
                "2" => "2",
                other => anyhow::bail!("scaleout runs workload 1 or 2, not {other}"),
            };
            let run_id = format!("so{round}-{}", unix_secs());
            let spread = scaleout::targets(&endpoints, &platform_token, &run_id).await?;
            let ctx = Arc::new(Ctx {
                target: spread[0].clone(),
                round,
                warmup: Duration::from_secs_f64(warmup),
                measure: Duration::from_secs_f64(seconds),
                ns6: String::new(),
                run_id,
                spread,
                server_pids: Vec::new(),
                zk_holder: Default::default(),
            });
            let mut cell = workloads::run_cell(ctx, w, clients).await?;
            cell.system = label;
            eprintln!(
                "  {}: {:.0} {} p50 {:.2} ms p99 {:.2} ms errors {}",
                cell.system,
                cell.throughput,
                workloads::unit(w),
                cell.p50_ms,
                cell.p99_ms,
                cell.errors
            );
            // label, acquires/s, p50, p99, errors: one line per cell for scaleout.sh.
            println!(
                "{}\t{:.0}\t{:.2}\t{:.2}\t{}",
                cell.system, cell.throughput, cell.p50_ms, cell.p99_ms, cell.errors
            );
            Ok(())
        }
        Cmd::Load {
            endpoints,
            platform_token,
            locks,
            clients,
            ttl,
        } => {
            let meta = find_leader(System::Raftlock, &endpoints, Duration::from_secs(30)).await?;
            let name = format!("mem-{}", unix_secs());
            let key = raftlock_project(&meta, &platform_token, &name).await?;
            // Straight to the leader of the shard raftlock placed it on, as a one-group
            // cluster's load goes to its leader: what is measured is holding the locks, not a
            // node forwarding the load to another.
            let leader = scaleout::leader_of_project(&endpoints, &platform_token, &name)
                .await?
                .unwrap_or(meta);
            let target = Target {
                system: System::Raftlock,
                leader,
                key: Some(key.clone()),
            };
            let rate = workloads::load_project_locks(&target, locks, clients, ttl).await?;
            eprintln!("held {locks} project locks at {rate:.0}/s");
            // The key on stdout, so the caller can read a lock back after a restart.
            println!("{key}");
            Ok(())
        }
        Cmd::Stall {
            endpoints,
            key,
            held,
            clients,
            seconds,
        } => {
            let leader = find_leader(System::Raftlock, &endpoints, Duration::from_secs(30)).await?;
            let target = Target {
                system: System::Raftlock,
                leader,
                key: Some(key),
            };
            let s = stall::run(&target, clients, held, seconds).await?;
            println!(
                "{} ops by {clients} clients in {seconds} s with {held} locks held: p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, errors {}; {} snapshots built meanwhile (mean {:.2} s each)",
                s.ops, s.p50_ms, s.p99_ms, s.max_ms, s.errors, s.snapshots, s.mean_snapshot_s
            );
            Ok(())
        }
        Cmd::Soak {
            endpoints,
            platform_token,
            rate,
            minutes,
            warmup_minutes,
            connections,
            pids,
            md,
            system,
        } => {
            anyhow::ensure!(
                !system.is_zookeeper(),
                "the soak drives raftlock or etcd, not ZooKeeper"
            );
            let leader = find_leader(system, &endpoints, Duration::from_secs(30)).await?;
            let key = match system {
                System::Raftlock => Some(
                    raftlock_project(&leader, &platform_token, &format!("soak-{}", unix_secs()))
                        .await?,
                ),
                System::Etcd | System::Zookeeper | System::ZookeeperMulti => None,
            };
            let target = Target {
                system,
                leader,
                key,
            };
            let metrics = soak::SoakMetrics::of(system);
            eprintln!("soak: {rate} jobs/s for {minutes} min (after {warmup_minutes} min of warm-up) over {connections} connections");
            let plan = soak::Plan {
                rate,
                minutes,
                warmup_minutes,
                connections,
            };
            let table = soak::run(&target, &endpoints, &pids, &plan, |m| {
                println!(
                    "[soak] minute {:>3}: {:>6.0} req/s  p50 {:>6.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  max {:>7.1} ms  queued max {:>7.1} ms  generator late max {:>7.1} ms  errors {}  rss {:?} MiB  leader changes {}  snapshots {}  fsyncs {} (mean {:.2} ms)  slow {:?}  longest disk wait {:?} ms  live heap {:?} MiB  huge pages {:?} MiB",
                    m.minute, m.requests as f64 / 60.0, m.p50_ms, m.p99_ms, m.p999_ms, m.max_ms, m.max_queued_ms, m.max_late_ms, m.errors,
                    soak::rounded(&m.rss_mib), m.leader_changes, m.snapshots, m.fsyncs, m.fsync_mean_ms, m.slow,
                    soak::rounded(&m.disk_wait_ms), soak::rounded(&m.heap_live_mib), soak::rounded(&m.huge_pages_mib)
                );
            })
            .await?;
            if let Some(path) = md {
                std::fs::write(&path, soak::markdown(&table, pids.len(), metrics))?;
            }
            Ok(())
        }
        Cmd::SoakPlot { table, svg, title } => {
            let text = std::fs::read_to_string(&table)
                .with_context(|| format!("reading {}", table.display()))?;
            report::plot_soak(&text, &svg, &title)
        }
        Cmd::Report {
            results,
            md,
            svg,
            header,
            footer,
        } => report::write(&results, &md, &svg, header.as_deref(), footer.as_deref()),
    }
}
