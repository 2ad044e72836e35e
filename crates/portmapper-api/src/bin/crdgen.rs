//! Prints the PortMapping CRD YAML; `make crds` writes it to `crds/`. With `--markdown`, prints
//! the field reference generated from the same schema (`docs/reference.md`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let markdown = std::env::args().skip(1).any(|a| a == "--markdown");
    let generated = if markdown {
        portmapper_api::reference::reference_markdown()
    } else {
        portmapper_api::crd::crd_yaml()
    };
    match generated {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("crdgen: {err}");
            ExitCode::FAILURE
        }
    }
}
