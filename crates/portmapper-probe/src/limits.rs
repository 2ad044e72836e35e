//! Safety limits. Every probe is bounded in time, request size and bytes read, whatever the
//! PortMapping says, so a hostile or broken pod cannot hold the operator's sockets or memory.

use std::time::Duration;

/// Longest timeout of any probe, whatever `timeoutSeconds` says.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// Shortest timeout of any probe.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest period between two probes of one target.
pub const MAX_PERIOD: Duration = Duration::from_secs(3600);
/// Largest success or failure threshold.
pub const MAX_THRESHOLD: u32 = 100;
/// Bytes of an `httpGet` response body read before the connection is closed (kubelet reads 10 KiB).
pub const MAX_HTTP_BODY_BYTES: usize = 10 * 1024;
/// Bytes of a gRPC health response read; a `HealthCheckResponse` is a few bytes.
pub const MAX_GRPC_BODY_BYTES: usize = 4 * 1024;
/// Bytes of a webhook answer read; a decision document is small.
pub const MAX_WEBHOOK_BODY_BYTES: usize = 16 * 1024;
/// Most extra headers an `httpGet` sends (the CRD allows 16).
pub const MAX_HEADERS: usize = 16;
/// Most bytes of header names and values an `httpGet` sends in total.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Longest reason kept for status.
pub const MAX_REASON_BYTES: usize = 256;
/// Extra time the prober grants an executor past its own timeout before it cancels the probe
/// itself; executors enforce the timeout, this only guards against one that does not.
pub const TIMEOUT_GRACE: Duration = Duration::from_millis(500);

/// Cuts a reason to [`MAX_REASON_BYTES`] on a character boundary.
pub fn truncate_reason(mut reason: String) -> String {
    if reason.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES - '…'.len_utf8();
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

/// Escapes control characters (ESC, CR, LF, …) and the Unicode bidirectional controls as
/// `\u{1b}`, so a reason from a webhook can neither drive a terminal that prints status nor
/// forge log lines, nor reorder what a reader sees.
pub fn escape_controls(reason: String) -> String {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !reason.chars().any(unsafe_char) {
        return reason;
    }
    let mut out = String::with_capacity(reason.len() + 8);
    for c in reason.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// `timeoutSeconds` as a duration within [`MIN_TIMEOUT`, `MAX_TIMEOUT`].
pub fn clamp_timeout(seconds: i32) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0)).clamp(MIN_TIMEOUT, MAX_TIMEOUT)
}

/// `periodSeconds` as a duration within [1 s, `MAX_PERIOD`].
pub fn clamp_period(seconds: i32) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
        .clamp(Duration::from_secs(1), MAX_PERIOD)
}

/// A threshold within [1, `MAX_THRESHOLD`].
pub fn clamp_threshold(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0).clamp(1, MAX_THRESHOLD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cut_on_char_boundaries() {
        let long = "é".repeat(300);
        let cut = truncate_reason(long);
        assert!(cut.len() <= MAX_REASON_BYTES);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate_reason("short".into()), "short");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            escape_controls("a\u{1b}]52;c;x\u{7}\r\nb\u{202e}c".into()),
            "a\\u{1b}]52;c;x\\u{7}\\u{d}\\u{a}b\\u{202e}c"
        );
        assert_eq!(escape_controls("plain é …".into()), "plain é …");
    }

    #[test]
    fn settings_are_clamped() {
        assert_eq!(clamp_timeout(0), MIN_TIMEOUT);
        assert_eq!(clamp_timeout(600), MAX_TIMEOUT);
        assert_eq!(clamp_timeout(5), Duration::from_secs(5));
        assert_eq!(clamp_period(-1), Duration::from_secs(1));
        assert_eq!(clamp_threshold(0), 1);
        assert_eq!(clamp_threshold(1000), MAX_THRESHOLD);
    }
}
