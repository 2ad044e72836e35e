//! `bench-scale`: the scale bench of issue 10 on the release binaries (`make bench-scale`).
//!
//! ```sh
//! bench-scale                                  # shape A 10,000 pods, then shape B 1,000 × 10
//! bench-scale --shape A --pods 50000 --no-rolling
//! bench-scale --shape B --mappings 200 --pods-per-mapping 10
//! ```
//!
//! It builds nothing: `--emulator` / `--operator` (or `SCALE_BENCH_EMULATOR` /
//! `SCALE_BENCH_OPERATOR`) name the binaries, default `target/release/…`.

// A bench binary: a failed unwrap aborts the run, which is what we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use scale_bench::{Binaries, RunConfig, Shape};

#[derive(Debug, Parser)]
#[command(name = "bench-scale", about = "portmapper scale bench (issue 10)")]
struct Args {
    /// Shapes to run, in order: A, B (default: both).
    #[arg(long, value_delimiter = ',')]
    shape: Vec<String>,
    /// Shape A: pods in the pool.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Shape B: PortMappings.
    #[arg(long, default_value_t = 1_000)]
    mappings: usize,
    /// Shape B: pods per PortMapping.
    #[arg(long, default_value_t = 10)]
    pods_per_mapping: usize,
    /// Pod flips (each sampled pod goes unready then ready: two flips).
    #[arg(long, default_value_t = 40)]
    flips: usize,
    /// Seed of the shapes and the flip sample.
    #[arg(long, default_value_t = 10)]
    seed: u64,
    /// The operator's --resync-seconds.
    #[arg(long, default_value_t = 5)]
    resync_seconds: u64,
    /// Resync periods to count converged writes over.
    #[arg(long, default_value_t = 3)]
    converged_resyncs: u32,
    /// Bound on operator start → all published, seconds.
    #[arg(long, default_value_t = 300)]
    publish_timeout: u64,
    /// Skip the rolling restart.
    #[arg(long)]
    no_rolling: bool,
    /// Keep the temp dir with the kubeconfig and the process logs.
    #[arg(long)]
    keep_logs: bool,
    /// The kube-emulator binary.
    #[arg(
        long,
        env = "SCALE_BENCH_EMULATOR",
        default_value = "target/release/kube-emulator"
    )]
    emulator: PathBuf,
    /// The portmapper binary.
    #[arg(
        long,
        env = "SCALE_BENCH_OPERATOR",
        default_value = "target/release/portmapper"
    )]
    operator: PathBuf,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let bins = match Binaries::new(args.emulator.clone(), args.operator.clone()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench-scale: {e}");
            std::process::exit(2);
        }
    };
    let shapes = if args.shape.is_empty() {
        vec!["A".to_owned(), "B".to_owned()]
    } else {
        args.shape.clone()
    };
    let mut reports = Vec::new();
    for s in &shapes {
        let shape = match s.to_ascii_uppercase().as_str() {
            "A" => Shape::A { pods: args.pods },
            "B" => Shape::B {
                mappings: args.mappings,
                pods: args.pods_per_mapping,
            },
            other => {
                eprintln!("bench-scale: unknown shape {other:?} (A or B)");
                std::process::exit(2);
            }
        };
        let mut cfg = RunConfig::new(shape);
        cfg.flips = args.flips;
        cfg.seed = args.seed;
        cfg.resync_seconds = args.resync_seconds;
        cfg.converged_resyncs = args.converged_resyncs;
        cfg.publish_timeout = Duration::from_secs(args.publish_timeout);
        cfg.rolling = !args.no_rolling;
        cfg.keep_logs = args.keep_logs;
        eprintln!(
            "bench-scale: shape {} (load average {})",
            shape.label(),
            scale_bench::procs::load_average()
        );
        // On Ctrl-C / SIGTERM the run future is dropped, which kills both child processes
        // (kill_on_drop); a plain exit would leave them running.
        let outcome = tokio::select! {
            r = scale_bench::run(&bins, &cfg) => Some(r),
            () = interrupted() => None,
        };
        // The select has dropped the run (and killed the processes) by here.
        let Some(outcome) = outcome else {
            eprintln!("bench-scale: interrupted");
            std::process::exit(130);
        };
        match outcome {
            Ok(r) => {
                // Each shape's column as soon as it is done: a later failure keeps the figures.
                eprintln!("{}", scale_bench::table(std::slice::from_ref(&r)));
                reports.push(r);
            }
            Err(e) => {
                eprintln!("bench-scale: shape {} failed: {e}", shape.label());
                std::process::exit(1);
            }
        }
    }
    println!(
        "portmapper scale bench: release binaries as processes, {} cores, seed {}, \
         --resync-seconds {}, {} flips",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        args.seed,
        args.resync_seconds,
        args.flips
    );
    println!();
    print!("{}", scale_bench::table(&reports));
}

/// Ctrl-C or SIGTERM.
async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
