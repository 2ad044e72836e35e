//! The report of a run on the real control plane: one table, a row per figure with the
//! operator's value, the native controller's and their ratio, then the figures of the API
//! itself (floors, memory of kube-apiserver and etcd) and the settings.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use super::apimetrics::ApiWrites;
use super::controllers::{Limits, Side};
use super::phases::{Cpu, SideReport};
use crate::floor::Floor;
use crate::procs::Memory;
use crate::shape::Shape;
use crate::status_floor::StatusCpu;
use crate::{mib, ms, percentile, secs};

/// Everything one run on the real control plane measured.
#[derive(Debug, Clone)]
pub struct RealReport {
    /// Shape and size.
    pub shape: Shape,
    /// Pods created.
    pub pods: usize,
    /// PortMappings created (and as many Services with a selector).
    pub mappings: usize,
    /// Creating the objects (not part of any figure).
    pub setup: Duration,
    /// The operator's figures.
    pub operator: SideReport,
    /// The native controller's figures.
    pub native: SideReport,
    /// The plain client's apply of each controller's slices.
    pub floors: Option<Vec<(Side, Floor)>>,
    /// kube-apiserver's CPU per PortMapping status write, by kind.
    pub status_floor: Option<StatusCpu>,
    /// kube-apiserver's memory at the end.
    pub apiserver_mem: Memory,
    /// etcd's memory at the end.
    pub etcd_mem: Memory,
    /// Both controllers' settings.
    pub limits: Limits,
    /// Load average before the first controller started.
    pub load_before: String,
    /// Load average at the end.
    pub load_after: String,
    /// Where the logs are, when kept.
    pub logs: Option<PathBuf>,
}

/// One figure of both controllers: the operator's, the native controller's, their ratio.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What it is.
    pub name: String,
    /// The operator's value, as printed.
    pub operator: String,
    /// The native controller's value, as printed.
    pub native: String,
    /// operator ÷ native, as printed ("–" when not a number).
    pub ratio: String,
}

fn ratio(op: f64, nat: f64) -> String {
    if nat > 0.0 {
        format!("{:.2}×", op / nat)
    } else if op == 0.0 {
        "=".into()
    } else {
        "–".into()
    }
}

/// A figure in milliseconds.
fn ms_row(name: &str, op: Duration, nat: Duration) -> Row {
    Row {
        name: format!("{name} (ms)"),
        operator: ms(op),
        native: ms(nat),
        ratio: ratio(op.as_secs_f64(), nat.as_secs_f64()),
    }
}

/// A figure in seconds.
fn s_row(name: &str, op: Duration, nat: Duration) -> Row {
    Row {
        name: format!("{name} (s)"),
        operator: format!("{:.2}", op.as_secs_f64()),
        native: format!("{:.2}", nat.as_secs_f64()),
        ratio: ratio(op.as_secs_f64(), nat.as_secs_f64()),
    }
}

/// A count or an average of counts.
fn n_row(name: &str, op: f64, nat: f64) -> Row {
    let fmt = |v: f64| {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    };
    Row {
        name: name.to_owned(),
        operator: fmt(op),
        native: fmt(nat),
        ratio: ratio(op, nat),
    }
}

fn per(d: Duration, n: usize) -> Duration {
    d.checked_div(u32::try_from(n.max(1)).unwrap_or(u32::MAX))
        .unwrap_or_default()
}

fn cpu_rows(what: &str, op: Cpu, nat: Cpu, n: (usize, usize)) -> Vec<Row> {
    vec![
        ms_row(
            &format!("controller CPU {what}"),
            per(op.controller, n.0),
            per(nat.controller, n.1),
        ),
        ms_row(
            &format!("kube-apiserver CPU {what}"),
            per(op.apiserver, n.0),
            per(nat.apiserver, n.1),
        ),
        ms_row(
            &format!("etcd CPU {what}"),
            per(op.etcd, n.0),
            per(nat.etcd, n.1),
        ),
        n_row(
            &format!("kube-apiserver heap allocated {what} (MB)"),
            per_n(op.apiserver_go.allocated, n.0) / 1e6,
            per_n(nat.apiserver_go.allocated, n.1) / 1e6,
        ),
        n_row(
            &format!("kube-apiserver garbage collections, {what} (all, not per unit)"),
            op.apiserver_go.collections as f64,
            nat.apiserver_go.collections as f64,
        ),
    ]
}

fn per_n(v: u64, n: usize) -> f64 {
    v as f64 / n.max(1) as f64
}

fn writes(w: &ApiWrites) -> f64 {
    w.slices() as f64
}

fn publication_rows(op: &SideReport, nat: &SideReport) -> Vec<Row> {
    let (o, n) = (&op.publication, &nat.publication);
    let mut r = vec![
        n_row("slices published", o.slices as f64, n.slices as f64),
        s_row("start → first slice event", o.first_slice, n.first_slice),
        s_row("start → all published", o.published, n.published),
        n_row(
            "slice writes during publication (API)",
            writes(&o.writes),
            writes(&n.writes),
        ),
        n_row(
            "other writes during publication (status, Events)",
            o.writes.other() as f64,
            n.writes.other() as f64,
        ),
    ];
    r.extend(cpu_rows("start → published", o.cpu, n.cpu, (1, 1)));
    r.push(n_row(
        "controller VmRSS after publication (MiB)",
        (o.memory.rss / 1024) as f64,
        (n.memory.rss / 1024) as f64,
    ));
    r.push(n_row(
        &format!(
            "controller peak VmHWM over its processes ({} / {}) (MiB)",
            op.processes, nat.processes
        ),
        (op.peak_hwm_kib / 1024) as f64,
        (nat.peak_hwm_kib / 1024) as f64,
    ));
    r.push(n_row(
        &format!(
            "writes while converged ({:.0} s after publication)",
            o.converged.as_secs_f64()
        ),
        (o.converged_writes.slices() + o.converged_writes.other()) as f64,
        (n.converged_writes.slices() + n.converged_writes.other()) as f64,
    ));
    r.push(ms_row(
        "controller CPU while converged",
        o.converged_cpu.controller,
        n.converged_cpu.controller,
    ));
    r
}

fn flip_rows(op: &SideReport, nat: &SideReport) -> Vec<Row> {
    let pick = |s: &SideReport, f: fn(&super::RealFlip) -> Duration| -> Vec<Duration> {
        s.flips.iter().map(f).collect()
    };
    let (of, nf) = (pick(op, |f| f.first), pick(nat, |f| f.first));
    let (oa, na) = (pick(op, |f| f.all), pick(nat, |f| f.all));
    let (ofl, nfl) = (pick(op, |f| f.floor), pick(nat, |f| f.floor));
    let (no, nn) = (op.flips.len(), nat.flips.len());
    let p = |v: &[Duration], q| percentile(v, q);
    let mut r = vec![
        n_row("flips", no as f64, nn as f64),
        ms_row(
            "flip: pod event → first slice event, p50",
            p(&of, 0.5),
            p(&nf, 0.5),
        ),
        ms_row(
            "flip: pod event → first slice event, p99",
            p(&of, 0.99),
            p(&nf, 0.99),
        ),
        ms_row(
            "flip: pod event → first slice event, max",
            p(&of, 1.0),
            p(&nf, 1.0),
        ),
        ms_row(
            "flip: pod event → every port's slice, p50",
            p(&oa, 0.5),
            p(&na, 0.5),
        ),
        ms_row(
            "flip: pod event → every port's slice, p99",
            p(&oa, 0.99),
            p(&na, 0.99),
        ),
        n_row(
            "slice writes per flip (API, exact)",
            writes(&op.flip_writes) / no.max(1) as f64,
            writes(&nat.flip_writes) / nn.max(1) as f64,
        ),
        n_row(
            "slice watch events per flip",
            op.flips.iter().map(|f| f.slice_events).sum::<u64>() as f64 / no.max(1) as f64,
            nat.flips.iter().map(|f| f.slice_events).sum::<u64>() as f64 / nn.max(1) as f64,
        ),
        n_row(
            "slice bytes per flip (JSON of the slice events; every watcher receives them)",
            op.flips.iter().map(|f| f.slice_bytes).sum::<u64>() as f64 / no.max(1) as f64,
            nat.flips.iter().map(|f| f.slice_bytes).sum::<u64>() as f64 / nn.max(1) as f64,
        ),
        n_row(
            "slices that list the flipped pod (before or after)",
            op.flips.iter().map(|f| f.slices).sum::<usize>() as f64 / no.max(1) as f64,
            nat.flips.iter().map(|f| f.slices).sum::<usize>() as f64 / nn.max(1) as f64,
        ),
        n_row(
            "other writes per flip (status, Events)",
            op.flip_writes.other() as f64 / no.max(1) as f64,
            nat.flip_writes.other() as f64 / nn.max(1) as f64,
        ),
    ];
    r.extend(cpu_rows(
        "per flip (settle included)",
        op.flip_cpu,
        nat.flip_cpu,
        (no, nn),
    ));
    r.push(ms_row(
        "floor: PATCH → pod watch event, p50",
        p(&ofl, 0.5),
        p(&nfl, 0.5),
    ));
    r.push(ms_row(
        "floor: PATCH → pod watch event, p99",
        p(&ofl, 0.99),
        p(&nfl, 0.99),
    ));
    let over = |a: &[Duration], b: &[Duration]| {
        p(a, 0.5).as_secs_f64() / p(b, 0.5).as_secs_f64().max(1e-9)
    };
    let (o, n) = (over(&of, &ofl), over(&nf, &nfl));
    r.push(Row {
        name: "flip p50 ÷ floor p50".into(),
        operator: format!("{o:.1}"),
        native: format!("{n:.1}"),
        ratio: ratio(o, n),
    });
    r
}

fn replacement_rows(op: &SideReport, nat: &SideReport) -> Vec<Row> {
    let (Some(o), Some(n)) = (&op.replacement, &nat.replacement) else {
        return Vec::new();
    };
    let mut r = vec![
        n_row(
            "rolling replacement: pods replaced",
            o.pods as f64,
            n.pods as f64,
        ),
        s_row(
            "rolling replacement: the bench's writes",
            o.write_time,
            n.write_time,
        ),
        s_row(
            "rolling replacement: first write → converged",
            o.converge,
            n.converge,
        ),
        s_row(
            "rolling replacement: last write → converged",
            o.after_last,
            n.after_last,
        ),
        n_row(
            "rolling replacement: slice writes (API, exact)",
            writes(&o.writes),
            writes(&n.writes),
        ),
        n_row(
            "rolling replacement: slice writes per pod replaced",
            writes(&o.writes) / o.pods.max(1) as f64,
            writes(&n.writes) / n.pods.max(1) as f64,
        ),
        n_row(
            "rolling replacement: slice writes per pod transition (2 per pod replaced: the \
             new pod published, the old one gone)",
            writes(&o.writes) / (2 * o.pods).max(1) as f64,
            writes(&n.writes) / (2 * n.pods).max(1) as f64,
        ),
        n_row(
            "rolling replacement: other writes (status, Events)",
            o.writes.other() as f64,
            n.writes.other() as f64,
        ),
        n_row(
            "rolling replacement: all writes per pod transition (slices, status, Events)",
            (writes(&o.writes) + o.writes.other() as f64) / (2 * o.pods).max(1) as f64,
            (writes(&n.writes) + n.writes.other() as f64) / (2 * n.pods).max(1) as f64,
        ),
        n_row(
            "rolling replacement: slice watch events",
            o.slice_events as f64,
            n.slice_events as f64,
        ),
        n_row(
            "rolling replacement: slice bytes per pod replaced (JSON of the slice events)",
            o.slice_bytes as f64 / o.pods.max(1) as f64,
            n.slice_bytes as f64 / n.pods.max(1) as f64,
        ),
    ];
    r.extend(cpu_rows("in the rolling replacement", o.cpu, n.cpu, (1, 1)));
    r
}

impl RealReport {
    /// Every figure of both controllers.
    pub fn rows(&self) -> Vec<Row> {
        let (op, nat) = (&self.operator, &self.native);
        let mut r = publication_rows(op, nat);
        r.extend(flip_rows(op, nat));
        r.extend(replacement_rows(op, nat));
        r
    }

    /// The figures of the API and the run, one value each.
    pub fn shared(&self) -> Vec<(String, String)> {
        let mut r = vec![(
            "objects".to_owned(),
            format!(
                "{} PortMapping(s) with as many selector-less Services, {} Services with a \
                 selector, {} pods on 1 Node",
                self.mappings, self.mappings, self.pods
            ),
        )];
        for (side, f) in self.floors.iter().flatten() {
            r.push((
                format!(
                    "floor: a plain client server-side-applies the {} slices",
                    side.label()
                ),
                format!(
                    "p50 {} ms per apply (≤ {} endpoints; a plain create: {} ms); {} slices in \
                     {} one at a time, {} four in flight",
                    ms(f.p50),
                    f.max_endpoints,
                    ms(f.create_p50),
                    f.slices,
                    secs(f.sequential),
                    secs(f.parallel4)
                ),
            ));
            if let Some(c) = f.server_cpu {
                r.push((
                    format!(
                        "floor: kube-apiserver CPU per write of the {} slices (ms)",
                        side.label()
                    ),
                    format!(
                        "apply that creates {}, apply changing one endpoint {}, no-op apply {}; \
                         create {}, update (PUT) changing one endpoint {}",
                        ms(c.apply_create),
                        ms(c.apply_change),
                        ms(c.apply_noop),
                        ms(c.create),
                        ms(c.update)
                    ),
                ));
            }
        }
        if let Some(c) = self.status_floor {
            r.push((
                format!(
                    "floor: kube-apiserver CPU per PortMapping status write, first / one port's \
                     counts changed ({} PortMappings, statuses of {} B, ms)",
                    c.mappings, c.status_bytes
                ),
                format!(
                    "server-side apply {} / {}; merge patch {} / {}; PUT with resourceVersion \
                     {} / {} (for reference, a merge patch of a label of the PortMapping: \
                     {} / {}; merge patch of status.observedGeneration alone {} / {}; merge \
                     patch of status in a copy of the CRD without its CEL rules: \
                     {} / {})",
                    ms(c.apply_first),
                    ms(c.apply_change),
                    ms(c.merge_first),
                    ms(c.merge_change),
                    ms(c.put_first),
                    ms(c.put_change),
                    ms(c.label_first),
                    ms(c.label_change),
                    ms(c.tiny_first),
                    ms(c.tiny_change),
                    ms(c.bare_merge_first),
                    ms(c.bare_merge_change)
                ),
            ));
        }
        for (name, m) in [
            ("kube-apiserver", self.apiserver_mem),
            ("etcd", self.etcd_mem),
        ] {
            r.push((
                format!("{name} VmRSS / VmHWM at the end (MiB)"),
                format!("{} / {}", mib(m.rss), mib(m.hwm)),
            ));
        }
        r.push(("client limits".into(), self.limits.describe()));
        r.push((
            "setup (create every object; not a figure)".into(),
            secs(self.setup),
        ));
        r.push((
            "load average before → after".into(),
            format!("{} → {}", self.load_before, self.load_after),
        ));
        r
    }

    /// The report as markdown: the side-by-side table, then the shared figures.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| {} on the real control plane | portmapper | native | portmapper ÷ native |",
            self.shape.label()
        );
        let _ = writeln!(out, "| --- | --- | --- | --- |");
        for row in self.rows() {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                row.name, row.operator, row.native, row.ratio
            );
        }
        out.push('\n');
        let _ = writeln!(out, "| {} | |", self.shape.label());
        let _ = writeln!(out, "| --- | --- |");
        for (name, value) in self.shared() {
            let _ = writeln!(out, "| {name} | {value} |");
        }
        out
    }
}
