//! The `raftlock` binary: `serve` runs one node, `dev` a local cluster, `certs` makes TLS
//! certificates, `openapi` prints the API's OpenAPI document; the other subcommands are the
//! command-line client (`raftlock_server::cli`).

use clap::{Parser, Subcommand};
use raftlock_server::config::ServeArgs;
use raftlock_server::dev::DevArgs;

/// mimalloc, counted (`raftlock_server::heap` says why each).
#[global_allocator]
static ALLOCATOR: raftlock_server::heap::CountingMimalloc = raftlock_server::heap::CountingMimalloc;

#[derive(Parser)]
#[command(name = "raftlock", version, about = "Raft-replicated lock service")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node.
    Serve(Box<ServeArgs>),
    /// Start a local development cluster and print how to use it.
    Dev(DevArgs),
    /// Make a private CA and node certificates for TLS (PEM files).
    Certs(raftlock_server::certs::CertsArgs),
    /// Print the OpenAPI 3.1 document of the HTTP API (what `GET /openapi.json` serves).
    Openapi,
    #[command(flatten)]
    Client(raftlock_server::cli::ClientCommand),
}

/// A multi-threaded runtime with `workers` threads (`None`: one per CPU).
fn runtime(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder.enable_all().build()
}

fn main() -> anyhow::Result<()> {
    raftlock_server::heap::keep_huge_pages_off();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let config = (*args).resolve()?;
            raftlock_server::telemetry::init_logs(&config.log_format, &config.log);
            runtime(config.worker_threads)?.block_on(raftlock_server::serve(config))
        }
        Command::Dev(args) => {
            raftlock_server::telemetry::init_logs("text", "info");
            runtime(None)?.block_on(raftlock_server::dev::run(args))
        }
        Command::Certs(args) => raftlock_server::certs::run(args),
        Command::Openapi => {
            print!("{}", raftlock_server::http::openapi::document_json());
            Ok(())
        }
        Command::Client(cmd) => {
            let filter = std::env::var("RAFTLOCK_CLI_LOG").unwrap_or_else(|_| "off".into());
            raftlock_server::telemetry::init_logs("text", &filter);
            let runtime = runtime(None)?;
            let code = runtime.block_on(raftlock_server::cli::run(cmd));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            std::process::exit(code)
        }
    }
}
