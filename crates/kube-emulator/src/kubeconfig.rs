//! The kubeconfig the emulator writes (docs/emulator-spec.md §1.1).

use std::net::SocketAddr;
use std::path::Path;

use crate::error::EmuError;

/// kubeconfig YAML for a server address.
pub fn render(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: emu\n  cluster:\n    server: \"http://{addr}\"\nusers:\n- name: emu\n  user: {{}}\ncontexts:\n- name: emu\n  context:\n    cluster: emu\n    user: emu\n    namespace: default\ncurrent-context: emu\n"
    )
}

/// Write the kubeconfig (creating parent directories).
pub fn write(path: &Path, addr: SocketAddr) -> Result<(), EmuError> {
    let e = |source| EmuError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(e)?;
    }
    std::fs::write(path, render(addr)).map_err(e)
}
