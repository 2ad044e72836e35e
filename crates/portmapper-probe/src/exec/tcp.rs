//! `tcpSocket`: the pod accepts a TCP connection on the port.

use super::NetworkExecutor;
use super::conn::connect;
use crate::error::ProbeError;
use crate::outcome::{Cause, ProbeResult};
use crate::target::Target;

pub(super) async fn probe(
    exec: &NetworkExecutor,
    target: &Target,
) -> Result<ProbeResult, ProbeError> {
    let addr = target.pod_addr(exec.config.allow_loopback)?;
    let stream = connect(addr.socket_addr()).await?;
    drop(stream);
    Ok(ProbeResult::include(
        Cause::Healthy,
        format!("TCP connect to {addr} succeeded"),
    ))
}
