//! The phases of a run on the real control plane, each with one controller running and the
//! other stopped: the publication, turns of flips (alternating), the rolling replacement.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch};

use super::RealConfig;
use super::apimetrics::{self, ApiWrites, GoRuntime, Metrics};
use super::controllers::{self, RealBinaries, Side};
use super::plane::Plane;
use crate::floor::{self, Floor};
use crate::observe::{Observer, Published, View};
use crate::procs::{self, Memory, Proc};
use crate::shape::{self, Generated, PodSpec};
use crate::status_floor::{self, StatusCpu};
use crate::{Error, bench_patch, bench_post};

/// A controller is idle (done with what its start found) once it and the API server used at
/// most this much CPU together over [`IDLE_WINDOW`].
const IDLE_CPU: Duration = Duration::from_millis(30);
const IDLE_WINDOW: Duration = Duration::from_millis(500);

/// CPU time (user + system) of the controller under test, kube-apiserver and etcd, and
/// kube-apiserver's Go runtime counters (zero where a reading took no scrape).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpu {
    /// The controller's process.
    pub controller: Duration,
    /// kube-apiserver.
    pub apiserver: Duration,
    /// etcd.
    pub etcd: Duration,
    /// kube-apiserver's bytes allocated and garbage collections.
    pub apiserver_go: GoRuntime,
}

impl Cpu {
    fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            controller: self.controller.saturating_sub(earlier.controller),
            apiserver: self.apiserver.saturating_sub(earlier.apiserver),
            etcd: self.etcd.saturating_sub(earlier.etcd),
            apiserver_go: self.apiserver_go.since(earlier.apiserver_go),
        }
    }

    fn plus(self, other: Cpu) -> Cpu {
        Cpu {
            controller: self.controller + other.controller,
            apiserver: self.apiserver + other.apiserver,
            etcd: self.etcd + other.etcd,
            apiserver_go: self.apiserver_go.plus(other.apiserver_go),
        }
    }
}

/// Which end of a measured window a snapshot is taken at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge {
    Start,
    End,
}

/// One controller's publication: its process started with every pod in place.
#[derive(Debug, Clone)]
pub struct Publication {
    /// Process start → the first slice event.
    pub first_slice: Duration,
    /// Process start → the slice event that completed the publication.
    pub published: Duration,
    /// Slices it published.
    pub slices: usize,
    /// Writes from its start until settled after the publication.
    pub writes: ApiWrites,
    /// CPU from its start until the publication was seen complete.
    pub cpu: Cpu,
    /// The window over which writes while converged were counted.
    pub converged: Duration,
    /// Writes in that window.
    pub converged_writes: ApiWrites,
    /// CPU in that window.
    pub converged_cpu: Cpu,
    /// Its memory after that window.
    pub memory: Memory,
}

/// One pod flip, as one controller published it.
#[derive(Debug, Clone)]
pub struct RealFlip {
    /// Pod.
    pub pod: String,
    /// Ready after the flip.
    pub ready: bool,
    /// The controller's slices that list the pod before or after the flip, whichever is more
    /// (the writes a flip needs: the operator leaves an unready pod out, the native controller
    /// lists it not ready).
    pub slices: usize,
    /// PATCH sent → the bench's pod watch event (the API's floor).
    pub floor: Duration,
    /// Pod watch event → the first slice event that shows the flip.
    pub first: Duration,
    /// Pod watch event → every port's slice shows it.
    pub all: Duration,
    /// Slice watch events from the PATCH until settled.
    pub slice_events: u64,
    /// Bytes of the slices those events carried (JSON).
    pub slice_bytes: u64,
}

/// The rolling replacement: pods replaced one after another (the new pod created and made
/// ready, then the old one deleted), as a Deployment's rollout with surge 1 does.
#[derive(Debug, Clone)]
pub struct Replacement {
    /// Pods replaced.
    pub pods: usize,
    /// The bench's first write → its last.
    pub write_time: Duration,
    /// The bench's first write → the last slice event, everything published.
    pub converge: Duration,
    /// The bench's last write → that event.
    pub after_last: Duration,
    /// Writes, counted by the API server.
    pub writes: ApiWrites,
    /// Slice watch events.
    pub slice_events: u64,
    /// Bytes of the slices those events carried (JSON).
    pub slice_bytes: u64,
    /// CPU from the first write until converged.
    pub cpu: Cpu,
}

/// Everything measured of one controller.
#[derive(Debug, Clone)]
pub struct SideReport {
    /// Which.
    pub side: Side,
    /// Its publication.
    pub publication: Publication,
    /// Its flips, over every turn.
    pub flips: Vec<RealFlip>,
    /// Writes over its turns of flips.
    pub flip_writes: ApiWrites,
    /// CPU over its turns of flips (settle times included).
    pub flip_cpu: Cpu,
    /// Its rolling replacement.
    pub replacement: Option<Replacement>,
    /// The highest VmHWM of its processes (KiB).
    pub peak_hwm_kib: u64,
    /// Processes it ran as (a start per phase).
    pub processes: usize,
}

/// A controller process and when it started.
struct Running {
    proc: Proc,
    started: Instant,
}

/// What the phases share.
pub(super) struct Ctx<'a> {
    bins: &'a RealBinaries,
    cfg: &'a RealConfig,
    plane: Plane,
    obs: Observer,
    pub(super) g: Generated,
    pods: Api<Pod>,
    logs: PathBuf,
    starts: usize,
    /// The pods replaced so far, (old, new): the counts of a publication do not tell a
    /// replaced pod from its replacement, so the bench checks these by name.
    replaced: Vec<(PodSpec, PodSpec)>,
    /// What one scrape of `/metrics` allocates in kube-apiserver (the page is about 2 MB):
    /// a window's two scrapes put about one scrape's worth inside it, taken off again.
    scrape_allocated: u64,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(
        bins: &'a RealBinaries,
        cfg: &'a RealConfig,
        plane: Plane,
        obs: Observer,
        g: Generated,
        logs: PathBuf,
    ) -> Self {
        let pods = Api::namespaced(plane.client.clone(), &cfg.namespace);
        Self {
            bins,
            cfg,
            plane,
            obs,
            g,
            pods,
            logs,
            starts: 0,
            replaced: Vec::new(),
            scrape_allocated: 0,
        }
    }

    fn cpu(&self, controller: Option<&Running>) -> Result<Cpu, Error> {
        Ok(Cpu {
            controller: match controller {
                Some(r) => procs::cpu_time(r.proc.pid)?,
                None => Duration::ZERO,
            },
            apiserver: procs::cpu_time(self.plane.apiserver)?,
            etcd: procs::cpu_time(self.plane.etcd)?,
            apiserver_go: GoRuntime::default(),
        })
    }

    async fn scrape(&self) -> Result<Metrics, Error> {
        apimetrics::scrape(&self.plane.client).await
    }

    /// Measures what one scrape allocates in kube-apiserver: the median of five back-to-back
    /// scrapes' differences.
    pub(super) async fn calibrate(&mut self) -> Result<(), Error> {
        let mut at = Vec::with_capacity(6);
        for _ in 0..6 {
            at.push(self.scrape().await?.go.allocated);
        }
        let mut steps: Vec<u64> = at.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
        steps.sort_unstable();
        self.scrape_allocated = steps[steps.len() / 2];
        Ok(())
    }

    /// Writes and CPU at one end of a measured window. At its start kube-apiserver first
    /// collects its garbage, so that the window does not pay for the phase before it (nor
    /// for its own garbage, collected after it: alike for both controllers, and the bytes
    /// allocated stand for it); the scrape sits outside the CPU readings.
    async fn snapshot(&self, r: Option<&Running>, edge: Edge) -> Result<(ApiWrites, Cpu), Error> {
        let (m, cpu) = match edge {
            Edge::Start => {
                apimetrics::collect_garbage(&self.plane.client).await?;
                self.save_allocations(edge).await?;
                let m = self.scrape().await?;
                (m, self.cpu(r)?)
            }
            Edge::End => {
                let cpu = self.cpu(r)?;
                let m = self.scrape().await?;
                self.save_allocations(edge).await?;
                (m, cpu)
            }
        };
        Ok((
            m.writes,
            Cpu {
                apiserver_go: m.go,
                ..cpu
            },
        ))
    }

    /// With `BENCH_APISERVER_ALLOCS=<dir>`, kube-apiserver's allocation profile at each edge
    /// of each measured window, numbered in order (`go tool pprof -sample_index=alloc_space
    /// -base 004-start.pb.gz 005-end.pb.gz`); outside the CPU readings and the scrapes.
    async fn save_allocations(&self, edge: Edge) -> Result<(), Error> {
        let Some(dir) = std::env::var_os("BENCH_APISERVER_ALLOCS") else {
            return Ok(());
        };
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)?;
        let n = std::fs::read_dir(&dir)?.count();
        let edge = if edge == Edge::Start { "start" } else { "end" };
        apimetrics::save_allocations(
            &self.plane.client,
            &dir.join(format!("{n:03}-{edge}.pb.gz")),
        )
        .await
    }

    /// What a window between two snapshots used, less the scrapes' own allocation.
    fn window(&self, end: Cpu, start: Cpu) -> Cpu {
        let mut used = end.since(start);
        used.apiserver_go.allocated = used
            .apiserver_go
            .allocated
            .saturating_sub(self.scrape_allocated);
        used
    }

    fn start(&mut self, side: Side) -> Result<Running, Error> {
        self.starts += 1;
        let proc = controllers::spawn(
            side,
            self.bins,
            &self.plane,
            &self.cfg.limits,
            &self.cfg.namespace,
            &self.logs,
            self.starts,
        )?;
        Ok(Running {
            proc,
            started: Instant::now(),
        })
    }

    /// Stops `r`, keeping its peak memory in `out`.
    async fn stop(&self, mut r: Running, out: &mut SideReport) -> Result<(), Error> {
        r.proc.check_alive(out.side.label())?;
        out.peak_hwm_kib = out.peak_hwm_kib.max(procs::memory(r.proc.pid)?.hwm);
        out.processes += 1;
        r.proc.stop().await;
        Ok(())
    }

    /// Whether `side`'s slices show every pod as it should be, and nothing else.
    fn shows_all(&self, v: &View, side: Side) -> bool {
        v.exactly_published(side.expected(&self.g))
            && self.replaced.iter().all(|(old, new)| {
                let service = side.service(new);
                side.ports(new).iter().all(|port| {
                    v.state(&service, port, &old.name) == Published::Absent
                        && v.state(&service, port, &new.name) == Published::Ready
                })
            })
    }

    /// Waits until `side`'s slices show every pod as it should be (and nothing else).
    async fn published(&self, side: Side, timeout: Duration) -> Result<Instant, Error> {
        self.obs
            .wait(&format!("{} to publish", side.label()), timeout, |v| {
                self.shows_all(v, side)
                    .then(|| v.last_slice_event.unwrap_or_else(Instant::now))
            })
            .await
    }

    /// Waits until the controller and the API server are done with what its start found.
    async fn idle(&self, r: &Running) -> Result<(), Error> {
        let deadline = Instant::now() + self.cfg.phase_timeout;
        loop {
            let before = self.cpu(Some(r))?;
            tokio::time::sleep(IDLE_WINDOW).await;
            let used = self.cpu(Some(r))?.since(before);
            if used.controller + used.apiserver <= IDLE_CPU {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout("the controller to go idle".into()));
            }
        }
    }

    /// Starts `side` on slices it published before and waits until it is idle.
    async fn warm(&mut self, side: Side) -> Result<Running, Error> {
        let r = self.start(side)?;
        self.published(side, self.cfg.publish_timeout).await?;
        self.idle(&r).await?;
        Ok(r)
    }

    /// `side`'s first start: every pod in place, none of its slices yet.
    pub(super) async fn publication(&mut self, side: Side) -> Result<SideReport, Error> {
        let (w0, c0) = self.snapshot(None, Edge::Start).await?;
        let tr0 = self.obs.view().transitions.len();
        let r = self.start(side)?;
        let done = self.published(side, self.cfg.publish_timeout).await?;
        let (_, c_done) = self.snapshot(Some(&r), Edge::End).await?;
        let cpu = self.window(c_done, c0);
        tokio::time::sleep(self.cfg.settle).await;
        let w1 = self.scrape().await?.writes;
        let (first, slices) = {
            let v = self.obs.view();
            (
                v.transitions.get(tr0).map_or(done, |t| t.at),
                v.slices_of(side.manager()),
            )
        };
        let c1 = self.cpu(Some(&r))?;
        tokio::time::sleep(self.cfg.converged).await;
        let (w2, c2) = (self.scrape().await?.writes, self.cpu(Some(&r))?);
        let publication = Publication {
            first_slice: first.saturating_duration_since(r.started),
            published: done.saturating_duration_since(r.started),
            slices,
            writes: w1.since(&w0),
            cpu,
            converged: self.cfg.converged,
            converged_writes: w2.since(&w1),
            converged_cpu: c2.since(c1),
            memory: procs::memory(r.proc.pid)?,
        };
        let mut out = SideReport {
            side,
            publication,
            flips: Vec::new(),
            flip_writes: ApiWrites::default(),
            flip_cpu: Cpu::default(),
            replacement: None,
            peak_hwm_kib: 0,
            processes: 0,
        };
        self.stop(r, &mut out).await?;
        Ok(out)
    }

    /// The plain client's server-side apply of each controller's slices, both stopped.
    pub(super) async fn floors(&self) -> Result<Vec<(Side, Floor)>, Error> {
        let mut out = Vec::new();
        for side in Side::BOTH {
            let selector = format!("{}={}", crate::observe::MANAGED_BY_KEY, side.manager());
            let f = floor::measure(
                &self.plane.client,
                &self.cfg.namespace,
                &selector,
                Some(self.plane.apiserver),
            )
            .await?;
            out.push((side, f));
        }
        Ok(out)
    }

    /// kube-apiserver's CPU per PortMapping status write, by kind, both controllers stopped.
    pub(super) async fn status_floor(&self) -> Result<Option<StatusCpu>, Error> {
        status_floor::measure(
            &self.plane.client,
            &self.cfg.namespace,
            self.plane.apiserver,
        )
        .await
    }

    /// Every controller's flips, in `cfg.rounds` turns each, alternating; both flip the same
    /// pods.
    pub(super) async fn flips(&mut self, sides: &mut [SideReport]) -> Result<(), Error> {
        let pairs = shape::sample(self.g.pods.len(), self.cfg.flips.div_ceil(2), self.cfg.seed);
        let per_turn = pairs.len().div_ceil(self.cfg.rounds.max(1)).max(1);
        for turn in pairs.chunks(per_turn) {
            for out in sides.iter_mut() {
                self.turn(turn, out).await?;
            }
        }
        Ok(())
    }

    async fn turn(&mut self, pairs: &[usize], out: &mut SideReport) -> Result<(), Error> {
        let r = self.warm(out.side).await?;
        let (w0, c0) = self.snapshot(Some(&r), Edge::Start).await?;
        'flips: for &i in pairs {
            for ready in [false, true] {
                if out.flips.len() >= self.cfg.flips {
                    break 'flips;
                }
                out.flips.push(self.flip(out.side, i, ready).await?);
            }
        }
        let (w1, c1) = self.snapshot(Some(&r), Edge::End).await?;
        out.flip_writes = out.flip_writes.plus(&w1.since(&w0));
        out.flip_cpu = out.flip_cpu.plus(self.window(c1, c0));
        self.stop(r, out).await
    }

    async fn flip(&self, side: Side, i: usize, ready: bool) -> Result<RealFlip, Error> {
        let p = &self.g.pods[i];
        let ports = side.ports(p);
        let (ev0, b0, slices) = {
            let v = self.obs.view();
            let held = v.slices_holding(Some(side.manager()), &p.name);
            (v.slice_events, v.slice_bytes, held)
        };
        let seen = crate::flip_seen(
            &self.pods,
            &self.obs,
            p,
            ready,
            &ports,
            self.cfg.phase_timeout,
        )
        .await?;
        if std::env::var_os("BENCH_FLIP_TRACE").is_some() {
            eprintln!(
                "flip-trace {side:?} {} {ready} {:.1}",
                p.name,
                seen.first().as_secs_f64() * 1000.0
            );
        }
        tokio::time::sleep(self.cfg.settle).await;
        let v = self.obs.view();
        let slices = slices.max(v.slices_holding(Some(side.manager()), &p.name));
        Ok(RealFlip {
            pod: p.name.clone(),
            ready,
            slices,
            floor: seen.floor(),
            first: seen.first(),
            all: seen.all(),
            slice_events: v.slice_events - ev0,
            slice_bytes: v.slice_bytes - b0,
        })
    }

    /// Each controller sees `cfg.replace` pods replaced (different pods for each).
    pub(super) async fn replacements(&mut self, sides: &mut [SideReport]) -> Result<(), Error> {
        if self.cfg.replace == 0 {
            return Ok(());
        }
        let n = self.cfg.replace.min(self.g.pods.len() / sides.len().max(1));
        let picked = shape::sample(self.g.pods.len(), n * sides.len(), self.cfg.seed ^ 0x7e91);
        for (out, idx) in sides.iter_mut().zip(picked.chunks(n.max(1))) {
            let r = self.warm(out.side).await?;
            out.replacement = Some(self.replace(out.side, &r, idx).await?);
            self.stop(r, out).await?;
        }
        Ok(())
    }

    async fn replace(
        &mut self,
        side: Side,
        r: &Running,
        idx: &[usize],
    ) -> Result<Replacement, Error> {
        let (w0, c0) = self.snapshot(Some(r), Edge::Start).await?;
        let (ev0, b0) = {
            let v = self.obs.view();
            (v.slice_events, v.slice_bytes)
        };
        let first = Instant::now();
        for &i in idx {
            self.replace_one(i).await?;
        }
        let last = Instant::now();
        let quiet = self.cfg.quiet;
        let converged = self
            .obs
            .wait(
                "the rolling replacement to converge",
                self.cfg.phase_timeout + quiet,
                |v| {
                    let last_event = v.last_slice_event.unwrap_or(first).max(last);
                    (self.shows_all(v, side) && last_event.elapsed() >= quiet).then_some(last_event)
                },
            )
            .await?;
        let (w1, c1) = self.snapshot(Some(r), Edge::End).await?;
        // One lock: a second `view()` in the same expression would wait for the first.
        let (events, bytes) = {
            let v = self.obs.view();
            (v.slice_events, v.slice_bytes)
        };
        Ok(Replacement {
            pods: idx.len(),
            write_time: last - first,
            converge: converged.saturating_duration_since(first),
            after_last: converged.saturating_duration_since(last),
            writes: w1.since(&w0),
            slice_events: events - ev0,
            slice_bytes: bytes - b0,
            cpu: self.window(c1, c0),
        })
    }

    /// Replaces pod `i`: the new pod created, bound and made ready (kubelet's status write),
    /// then the old one deleted at once (no kubelet confirms a graceful delete).
    async fn replace_one(&mut self, i: usize) -> Result<(), Error> {
        let old = self.g.pods[i].clone();
        let new = old.replacement(i);
        self.pods
            .create(&bench_post(), &serde_json::from_value(new.object())?)
            .await?;
        self.pods
            .patch_status(&new.name, &bench_patch(), &Patch::Merge(&new.status(true)))
            .await?;
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        self.pods.delete(&old.name, &now).await?;
        self.g.pods[i] = new.clone();
        self.replaced.push((old, new));
        Ok(())
    }

    /// kube-apiserver's and etcd's memory at the end.
    pub(super) fn plane_memory(&self) -> Result<(Memory, Memory), Error> {
        Ok((
            procs::memory(self.plane.apiserver)?,
            procs::memory(self.plane.etcd)?,
        ))
    }
}
