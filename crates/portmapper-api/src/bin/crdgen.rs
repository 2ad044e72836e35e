//! Prints the PortMapping CRD YAML; `make crds` writes it to `crds/`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match portmapper_api::crd::crd_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("crdgen: {err}");
            ExitCode::FAILURE
        }
    }
}
