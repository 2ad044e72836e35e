//! `bench-scale`: the scale bench of issue 10 on the release binaries (`make bench-scale`).
//!
//! ```sh
//! bench-scale                                  # shape A 10,000 pods, then shape B 1,000 × 10
//! bench-scale --shape A --pods 50000 --no-rolling
//! bench-scale --shape B --mappings 200 --pods-per-mapping 10
//! bench-scale --control-plane real             # side by side with the native controller
//! ```
//!
//! It builds nothing: `--emulator` / `--operator` / `--realkube` (or `SCALE_BENCH_EMULATOR` /
//! `SCALE_BENCH_OPERATOR` / `REALKUBE_BIN`) name the binaries, default `target/release/…` and
//! `target/realkube/realkube`.

// A bench binary: a failed unwrap aborts the run, which is what we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use scale_bench::real::{self, Limits, RealBinaries, RealConfig};
use scale_bench::{Binaries, RunConfig, Shape};

/// Which API server the bench runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ControlPlane {
    /// The release kube-emulator; the operator alone.
    Emulator,
    /// etcd and kube-apiserver (realkube); the operator side by side with the native
    /// EndpointSlice controller.
    Real,
}

#[derive(Debug, Parser)]
#[command(name = "bench-scale", about = "portmapper scale bench (issue 10)")]
struct Args {
    /// The API server: the emulator, or the real control plane side by side with the native
    /// EndpointSlice controller.
    #[arg(long, value_enum, default_value_t = ControlPlane::Emulator)]
    control_plane: ControlPlane,
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
    /// The operator's --resync-seconds (default: 5 on the emulator; the operator's own 300 on
    /// the real control plane, where the native controller does not resync either).
    #[arg(long)]
    resync_seconds: Option<u64>,
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
    /// Real control plane: the realkube binary (tools/realkube).
    #[arg(long, env = "REALKUBE_BIN", default_value = "target/realkube/realkube")]
    realkube: PathBuf,
    /// Real control plane: turns each controller takes, alternating, to make its flips.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Real control plane: pods each controller sees replaced in the rolling replacement.
    #[arg(long, default_value_t = 200)]
    replace: usize,
    /// Real control plane: kube-controller-manager --kube-api-qps.
    #[arg(long, default_value_t = 1000)]
    kcm_qps: u32,
    /// Real control plane: kube-controller-manager --kube-api-burst.
    #[arg(long, default_value_t = 2000)]
    kcm_burst: u32,
    /// Real control plane: kube-controller-manager --concurrent-service-endpoint-syncs.
    #[arg(long, default_value_t = 5)]
    kcm_syncs: u32,
    /// Real control plane: one more kube-controller-manager flag (repeatable).
    #[arg(long = "kcm-arg", allow_hyphen_values = true)]
    kcm_args: Vec<String>,
    /// Real control plane: one more operator flag (repeatable).
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    operator_args: Vec<String>,
    /// Real control plane: the operator's --concurrency.
    #[arg(long, default_value_t = 5)]
    operator_concurrency: u16,
}

impl Args {
    fn shapes(&self) -> Vec<Shape> {
        let names = if self.shape.is_empty() {
            vec!["A".to_owned(), "B".to_owned()]
        } else {
            self.shape.clone()
        };
        names
            .iter()
            .map(|s| match s.to_ascii_uppercase().as_str() {
                "A" => Shape::A { pods: self.pods },
                "B" => Shape::B {
                    mappings: self.mappings,
                    pods: self.pods_per_mapping,
                },
                other => {
                    eprintln!("bench-scale: unknown shape {other:?} (A or B)");
                    std::process::exit(2);
                }
            })
            .collect()
    }

    fn real_config(&self, shape: Shape) -> RealConfig {
        let mut cfg = RealConfig::new(shape);
        cfg.seed = self.seed;
        cfg.flips = self.flips;
        cfg.rounds = self.rounds;
        cfg.replace = if self.no_rolling { 0 } else { self.replace };
        cfg.publish_timeout = Duration::from_secs(self.publish_timeout);
        cfg.keep_logs = self.keep_logs;
        cfg.limits = Limits {
            kcm_qps: self.kcm_qps,
            kcm_burst: self.kcm_burst,
            kcm_syncs: self.kcm_syncs,
            operator_concurrency: self.operator_concurrency,
            resync_seconds: self.resync_seconds.unwrap_or(cfg.limits.resync_seconds),
            kcm_extra: self.kcm_args.clone(),
            operator_extra: self.operator_args.clone(),
            ..cfg.limits
        };
        cfg
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    if args.control_plane == ControlPlane::Real {
        return main_real(&args).await;
    }
    let bins = match Binaries::new(args.emulator.clone(), args.operator.clone()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench-scale: {e}");
            std::process::exit(2);
        }
    };
    let resync_seconds = args.resync_seconds.unwrap_or(5);
    let mut reports = Vec::new();
    for shape in args.shapes() {
        let mut cfg = RunConfig::new(shape);
        cfg.flips = args.flips;
        cfg.seed = args.seed;
        cfg.resync_seconds = resync_seconds;
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
        resync_seconds,
        args.flips
    );
    println!();
    print!("{}", scale_bench::table(&reports));
}

/// Each shape on a real control plane of its own, the operator and the native controller side
/// by side: one table per shape.
async fn main_real(args: &Args) {
    let bins = match RealBinaries::new(args.realkube.clone(), args.operator.clone()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench-scale: {e}");
            std::process::exit(2);
        }
    };
    let mut tables = Vec::new();
    for shape in args.shapes() {
        let cfg = args.real_config(shape);
        eprintln!(
            "bench-scale: shape {} on the real control plane (load average {})",
            shape.label(),
            scale_bench::procs::load_average()
        );
        let outcome = tokio::select! {
            r = real::run(&bins, &cfg) => Some(r),
            () = interrupted() => None,
        };
        let Some(outcome) = outcome else {
            eprintln!("bench-scale: interrupted");
            std::process::exit(130);
        };
        match outcome {
            Ok(r) => {
                let table = r.table();
                eprintln!("{table}");
                if let Some(logs) = &r.logs {
                    eprintln!("bench-scale: logs in {}", logs.display());
                }
                tables.push(table);
            }
            Err(e) => {
                eprintln!("bench-scale: shape {} failed: {e}", shape.label());
                std::process::exit(1);
            }
        }
    }
    println!(
        "portmapper scale bench on the real control plane (realkube: etcd, kube-apiserver; \
         etcd fsync off), side by side with kube-controller-manager's EndpointSlice controller; \
         {} cores, seed {}, {} flips per controller in {} turns each, {} pods replaced per \
         controller",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        args.seed,
        args.flips,
        args.rounds,
        if args.no_rolling { 0 } else { args.replace }
    );
    for t in tables {
        println!();
        print!("{t}");
    }
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
