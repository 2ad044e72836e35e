//! `portmapper`: the operator binary.

use std::process::ExitCode;

use clap::Parser;
use portmapper::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let telemetry = match &cli.command {
        #[cfg(feature = "demo")]
        Command::Demo(args) => portmapper::telemetry::init_to_file(&cli.log, &args.log_path()),
        _ => portmapper::telemetry::init(&cli.log),
    };
    if let Err(err) = telemetry {
        eprintln!("portmapper: {err}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Crd => match portmapper_api::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                Ok(())
            }
            Err(err) => Err(portmapper::error::Error::Config(err.to_string())),
        },
        Command::Run(args) => runtime().and_then(|rt| rt.block_on(portmapper::run::run(args))),
        #[cfg(feature = "demo")]
        Command::Demo(args) => runtime().and_then(|rt| rt.block_on(portmapper::demo::run(args))),
        Command::Render(args) => return portmapper::render::main(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "portmapper failed");
            eprintln!("portmapper: {err}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, portmapper::error::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| portmapper::error::Error::Config(format!("starting the async runtime: {e}")))
}
