//! The `raftlock` binary: `serve` runs one node, `dev` a local cluster.

use clap::{Parser, Subcommand};
use raftlock_server::config::ServeArgs;
use raftlock_server::dev::DevArgs;

#[derive(Parser)]
#[command(name = "raftlock", version, about = "Raft-replicated lock service")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node.
    Serve(ServeArgs),
    /// Start a local development cluster and print how to use it.
    Dev(DevArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Serve(args) => {
            let config = args.resolve()?;
            raftlock_server::telemetry::init_logs(&config.log_format, &config.log);
            runtime.block_on(raftlock_server::serve(config))
        }
        Command::Dev(args) => {
            raftlock_server::telemetry::init_logs("text", "info");
            runtime.block_on(raftlock_server::dev::run(args))
        }
    }
}
