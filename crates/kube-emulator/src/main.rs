//! `kube-emulator serve --listen 127.0.0.1:0 --kubeconfig <path> [--load <file-or-dir>...]`

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracing::{error, info};

#[derive(Parser)]
#[command(
    name = "kube-emulator",
    version,
    about = "In-memory Kubernetes API server emulator"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve until SIGINT/SIGTERM.
    Serve {
        /// Listen address (port 0 = ephemeral).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Where to write the kubeconfig for the bound address.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Manifests to load at start (files or directories; repeatable).
        #[arg(long)]
        load: Vec<PathBuf>,
        /// BOOKMARK cadence in seconds.
        #[arg(long, default_value_t = 60)]
        bookmark_seconds: u64,
        /// Seed of the fault RNG.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Log as JSON lines.
        #[arg(long)]
        json_logs: bool,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let Cmd::Serve {
        listen,
        kubeconfig,
        load,
        bookmark_seconds,
        seed,
        json_logs,
    } = cli.cmd;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if json_logs {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    // Revisions keep increasing across restarts of the binary: clients resuming a watch with a
    // revision from the previous process get a clean 410 + relist instead of "too large".
    let clock_rv = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1);
    let mut b = kube_emulator::Emulator::builder()
        .initial_resource_version(clock_rv)
        .listen(listen)
        .kubeconfig(&kubeconfig)
        .bookmark_interval(Duration::from_secs(bookmark_seconds))
        .seed(seed);
    for p in load {
        b = b.load(p);
    }
    let emu = match b.start().await {
        Ok(e) => e,
        Err(e) => {
            error!(error = %e, "failed to start");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!(
        "kube-emulator listening on {} (kubeconfig {})",
        emu.url(),
        kubeconfig.display()
    );
    wait_for_signal().await;
    info!("shutting down");
    drop(emu);
    std::process::ExitCode::SUCCESS
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
