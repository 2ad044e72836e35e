//! `D/state.json` of `realkube up`: each component's process, ports and arguments (read by
//! [`crate::realkube`], rewritten by [`crate::components`] when a test restarts a component).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `D/state.json`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct State {
    /// The API server's URL.
    pub server: String,
    /// etcd's client URL (plain HTTP on loopback).
    pub etcd: String,
    pub ports: BTreeMap<String, u16>,
    pub components: BTreeMap<String, Component>,
}

/// One component of `D/state.json`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Component {
    pub pid: u32,
    pub args: Vec<String>,
    pub log: String,
}
