//! The operator's own `/metrics`, read over plain HTTP on loopback: how many reconciles a flip
//! causes and how long they take, which the watch-event latency alone cannot tell apart (one
//! slow plan, or several plans in a row).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Error;

/// Reconciles so far: how many and their total time (`portmapper_reconcile_duration_seconds`),
/// and the time spent planning in them (`portmapper_plan_duration_seconds`; 0 from an
/// operator without it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reconciles {
    pub count: u64,
    pub seconds: f64,
    pub plans: u64,
    pub plan_seconds: f64,
}

impl Reconciles {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Reconciles) -> Reconciles {
        Reconciles {
            count: self.count.saturating_sub(earlier.count),
            seconds: (self.seconds - earlier.seconds).max(0.0),
            plans: self.plans.saturating_sub(earlier.plans),
            plan_seconds: (self.plan_seconds - earlier.plan_seconds).max(0.0),
        }
    }
}

/// A free loopback address for the operator's HTTP server (bound, then released: the operator
/// binds it a moment later).
pub fn free_addr() -> Result<SocketAddr, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Reads the reconcile histogram's count and sum from the operator at `addr`.
pub async fn reconciles(addr: SocketAddr) -> Result<Reconciles, Error> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    parse(&body).ok_or_else(|| {
        Error::Admin(format!(
            "the operator's /metrics at {addr} has no portmapper_reconcile_duration_seconds"
        ))
    })
}

fn parse(text: &str) -> Option<Reconciles> {
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some(Reconciles {
        // A count is an integer written as a float by some encoders.
        count: value("portmapper_reconcile_duration_seconds_count")? as u64,
        seconds: value("portmapper_reconcile_duration_seconds_sum")?,
        plans: value("portmapper_plan_duration_seconds_count").unwrap_or(0.0) as u64,
        plan_seconds: value("portmapper_plan_duration_seconds_sum").unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_count_and_sum_of_the_histogram() {
        let text = "# HELP portmapper_reconcile_duration_seconds Time of one reconcile.\n\
                    portmapper_reconcile_duration_seconds_sum 1.25\n\
                    portmapper_reconcile_duration_seconds_count 7\n\
                    portmapper_reconcile_duration_seconds_bucket{le=\"0.0005\"} 0\n";
        assert_eq!(
            parse(text),
            Some(Reconciles {
                count: 7,
                seconds: 1.25,
                plans: 0,
                plan_seconds: 0.0
            })
        );
        let planned = format!(
            "{text}portmapper_plan_duration_seconds_sum 0.5\nportmapper_plan_duration_seconds_count 6\n"
        );
        assert_eq!(
            parse(&planned).map(|r| (r.plans, r.plan_seconds)),
            Some((6, 0.5))
        );
        assert_eq!(parse("portmapper_reconciles_total 3\n"), None);
    }
}
