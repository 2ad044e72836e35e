//! The command line entry point shared by the `portmapper` binary and its kubectl plugin name,
//! `kubectl-portmapper` (kubectl runs `kubectl-portmapper status …` for `kubectl portmapper
//! status …`), so both are the same program and only the name in messages differs.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command};

/// Parses the command line and runs the command; `program` is the name shown in usage and
/// error messages (`portmapper`, or `kubectl portmapper` for the plugin).
pub fn main(program: &str) -> ExitCode {
    let matches = Cli::command().bin_name(program).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let telemetry = match &cli.command {
        #[cfg(feature = "demo")]
        Command::Demo(args) => {
            crate::runtime::telemetry::init_to_file(&cli.log.config(), &args.log_path())
        }
        _ => crate::runtime::telemetry::init(&cli.log.config()),
    };
    if let Err(err) = telemetry {
        eprintln!("{program}: {err}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Crd => match portmapper_api::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                Ok(())
            }
            Err(err) => Err(crate::runtime::error::Error::Config(err.to_string())),
        },
        Command::Run(args) => {
            runtime().and_then(|rt| rt.block_on(crate::commands::run::run(args.config())))
        }
        #[cfg(feature = "demo")]
        Command::Demo(args) => {
            runtime().and_then(|rt| rt.block_on(crate::commands::demo::run(args.config())))
        }
        Command::Render(args) => return crate::commands::render::main(&args.options()),
        Command::Status(args) => return crate::commands::status::main(args.options(), program),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "portmapper failed");
            eprintln!("{program}: {err}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, crate::runtime::error::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            crate::runtime::error::Error::Config(format!("starting the async runtime: {e}"))
        })
}
