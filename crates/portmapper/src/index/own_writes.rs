//! Our own slice writes the slice cache has not shown yet (the native controller's
//! EndpointSliceTracker): a plan made against a cache that lags our writes would see a slice we
//! just created as missing, or one we just emptied as still full, and re-pack — duplicating
//! endpoints across slices and writing again after convergence. A PortMapping with writes still
//! in flight through the watch is not planned; the watch event that brings the write wakes it.
//!
//! Exact, because a watch delivers one object's versions in order: the expectation of a write
//! is met by the event carrying the resourceVersion the API server answered with (a later
//! writer's event can only come after it), that of a deletion by the delete event.
//!
//! An apply is awaited from the moment it is sent, not only once answered: its event often
//! comes before its answer, and taken then for someone else's change it woke the writer for a
//! pass that found nothing to do (at 10,000 pods, half a pass per pod flip). What the watch
//! shows of the slice while the apply is in flight is kept until the answer says whose it was:
//! exactly the answered version is the echo; anything else (another writer's version, a
//! deletion, a failed apply after an event) wakes the writer, as the event would have.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::ObjectRef;

/// How long an expectation may wait for its event. Past it the cache is taken as the truth: a
/// watch restart can skip the very version we wrote (a relist shows a later one), and the
/// object may have been replaced in between.
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(10);

type SliceRef = ObjectRef<EndpointSlice>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Awaited {
    /// The event with this resourceVersion.
    Version(String),
    /// The delete event.
    Gone,
    /// The answer of an apply in flight; meanwhile, what the watch showed of the slice, in order
    /// (`None`: its deletion).
    Answer { seen: Vec<Option<String>> },
}

#[derive(Debug)]
struct Expectation {
    owner: String,
    awaited: Awaited,
    since: Instant,
}

/// Writes per slice, and the slices per owner (PortMapping UID) that still await their event.
#[derive(Debug, Default)]
pub struct OwnWrites {
    by_slice: HashMap<SliceRef, Expectation>,
    by_owner: HashMap<String, HashSet<SliceRef>>,
    /// Owners whose reconcile was put off because their writes were not in the cache yet: the
    /// event that brings the last of them must wake them.
    waiting: HashSet<String>,
}

/// What a slice event is to the writes awaited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// Not a write we await (someone else's change, or a version we did not write).
    NotAwaited,
    /// The version `owner` wrote. `wake`: it was the last one a put-off reconcile of `owner`
    /// waited for. Otherwise the event tells `owner` nothing its own plan did not already know.
    Echo { owner: String, wake: bool },
    /// A version of a slice `owner` is applying, before the answer: whether it is the echo is
    /// known from the answer ([`OwnWrites::answered`] tells the owner to wake if not).
    InFlight { owner: String },
}

/// What an apply's answer means to its writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// Nothing new: await the event (or it already came and was the echo).
    Awaited,
    /// The watch showed something else of the slice while the apply was in flight (or a
    /// put-off reconcile waited for this write): the writer must plan again.
    Wake,
}

impl OwnWrites {
    /// `owner` is about to apply `slice`: its events are held until the answer.
    pub fn applying(&mut self, owner: &str, slice: SliceRef, now: Instant) {
        self.expect(owner, slice, Awaited::Answer { seen: Vec::new() }, now);
    }

    /// `owner` applied `slice`; the API server answered with `resource_version`. `cached`: the
    /// slice cache already holds that version (for an apply not announced by
    /// [`applying`](Self::applying)).
    pub fn answered(
        &mut self,
        owner: &str,
        slice: SliceRef,
        resource_version: String,
        cached: bool,
        now: Instant,
    ) -> Answered {
        let seen = self.take_seen(owner, &slice);
        match seen {
            Some(seen) if !seen.is_empty() => {
                self.forget(&slice);
                if seen
                    .iter()
                    .all(|v| v.as_deref() == Some(resource_version.as_str()))
                {
                    // The echo came first and was held: the write is in the cache.
                    self.met(owner)
                } else {
                    Answered::Wake
                }
            }
            _ if cached => {
                self.forget(&slice);
                Answered::Awaited
            }
            _ => {
                self.expect(owner, slice, Awaited::Version(resource_version), now);
                Answered::Awaited
            }
        }
    }

    /// `owner`'s apply of `slice` failed (or was answered without a resourceVersion): whatever
    /// the watch showed meanwhile is not known to be the echo.
    pub fn apply_failed(&mut self, owner: &str, slice: &SliceRef) -> Answered {
        let seen = self.take_seen(owner, slice);
        self.forget(slice);
        match seen {
            Some(seen) if !seen.is_empty() => Answered::Wake,
            _ => Answered::Awaited,
        }
    }

    /// What the watch showed of `slice` while `owner`'s apply was in flight, taken out; `None`
    /// when no apply of `owner` was announced.
    fn take_seen(&mut self, owner: &str, slice: &SliceRef) -> Option<Vec<Option<String>>> {
        match self.by_slice.get_mut(slice) {
            Some(Expectation {
                owner: o,
                awaited: Awaited::Answer { seen },
                ..
            }) if o == owner => Some(std::mem::take(seen)),
            _ => None,
        }
    }

    /// An expectation of `owner` was met: whether it was the last a put-off reconcile waited
    /// for.
    fn met(&mut self, owner: &str) -> Answered {
        if !self.by_owner.contains_key(owner) && self.waiting.remove(owner) {
            Answered::Wake
        } else {
            Answered::Awaited
        }
    }

    /// `owner` deleted `slice`.
    pub fn deleted(&mut self, owner: &str, slice: SliceRef, now: Instant) {
        self.expect(owner, slice, Awaited::Gone, now);
    }

    fn expect(&mut self, owner: &str, slice: SliceRef, awaited: Awaited, since: Instant) {
        self.forget(&slice);
        self.by_owner
            .entry(owner.to_owned())
            .or_default()
            .insert(slice.clone());
        self.by_slice.insert(
            slice,
            Expectation {
                owner: owner.to_owned(),
                awaited,
                since,
            },
        );
    }

    /// The cache now holds `slice` at `resource_version`.
    pub fn observed(&mut self, slice: &SliceRef, resource_version: Option<&str>) -> Observed {
        if let Some(Expectation {
            owner,
            awaited: Awaited::Answer { seen },
            ..
        }) = self.by_slice.get_mut(slice)
        {
            seen.push(resource_version.map(str::to_owned));
            return Observed::InFlight {
                owner: owner.clone(),
            };
        }
        let owner = self.by_slice.get(slice).and_then(|e| match &e.awaited {
            Awaited::Version(v) if Some(v.as_str()) == resource_version => Some(e.owner.clone()),
            _ => None,
        });
        let Some(owner) = owner else {
            return Observed::NotAwaited;
        };
        self.forget(slice);
        let wake = !self.by_owner.contains_key(&owner) && self.waiting.remove(&owner);
        Observed::Echo { owner, wake }
    }

    /// `slice` left the cache: whatever was awaited of it, the cache has moved past it.
    /// Whether `slice`'s deletion is one of ours the cache has not shown yet.
    pub fn awaits_gone(&self, slice: &SliceRef) -> bool {
        self.by_slice
            .get(slice)
            .is_some_and(|e| matches!(e.awaited, Awaited::Gone))
    }

    pub fn observed_gone(&mut self, slice: &SliceRef) {
        if let Some(Expectation {
            awaited: Awaited::Answer { seen },
            ..
        }) = self.by_slice.get_mut(slice)
        {
            // Its answer says more: an apply answered after this deletion was someone else's
            // change too.
            seen.push(None);
            return;
        }
        self.forget(slice);
    }

    /// Whether a write of `owner` has not reached the cache yet (expired expectations are
    /// dropped here).
    pub fn pending(&mut self, owner: &str, now: Instant) -> bool {
        let Some(slices) = self.by_owner.get(owner) else {
            return false;
        };
        let expired: Vec<SliceRef> = slices
            .iter()
            .filter(|s| {
                self.by_slice
                    .get(*s)
                    .is_none_or(|e| now.duration_since(e.since) >= EXPECTATION_TIMEOUT)
            })
            .cloned()
            .collect();
        for s in &expired {
            tracing::debug!(slice = %s, "own write never showed in the cache; trusting the cache");
            self.forget(s);
        }
        let pending = self.by_owner.get(owner).is_some_and(|s| !s.is_empty());
        if pending {
            self.waiting.insert(owner.to_owned());
        } else {
            self.waiting.remove(owner);
        }
        pending
    }

    fn forget(&mut self, slice: &SliceRef) {
        if let Some(e) = self.by_slice.remove(slice)
            && let Some(set) = self.by_owner.get_mut(&e.owner)
        {
            set.remove(slice);
            if set.is_empty() {
                self.by_owner.remove(&e.owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str) -> SliceRef {
        ObjectRef::new(name).within("shop")
    }

    #[test]
    fn a_write_is_pending_until_its_own_version_is_seen() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.answered("pm", slice("web.http"), "7".into(), false, t0);
        assert!(w.pending("pm", t0));
        assert!(!w.pending("other", t0), "per owner");
        w.observed(&slice("web.http"), Some("6"));
        assert!(w.pending("pm", t0), "an older version is not ours");
        w.observed(&slice("web.http"), Some("7"));
        assert!(!w.pending("pm", t0));
    }

    #[test]
    fn a_deletion_is_pending_until_the_delete_event() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.deleted("pm", slice("web.http.2"), t0);
        w.observed(&slice("web.http.2"), Some("9"));
        assert!(
            w.pending("pm", t0),
            "an apply event of the deleted slice is older"
        );
        w.observed_gone(&slice("web.http.2"));
        assert!(!w.pending("pm", t0));
    }

    #[test]
    fn the_latest_write_of_a_slice_is_the_one_awaited() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.answered("pm", slice("web.http"), "7".into(), false, t0);
        w.answered("pm", slice("web.http"), "8".into(), false, t0);
        w.observed(&slice("web.http"), Some("7"));
        assert!(w.pending("pm", t0));
        w.observed(&slice("web.http"), Some("8"));
        assert!(!w.pending("pm", t0));
    }

    #[test]
    fn an_echo_wakes_its_owner_only_when_a_put_off_reconcile_waits_for_it() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.answered("pm", slice("web.http"), "7".into(), false, t0);
        w.answered("pm", slice("web.https"), "8".into(), false, t0);
        assert_eq!(
            w.observed(&slice("web.http"), Some("7")),
            Observed::Echo {
                owner: "pm".into(),
                wake: false
            },
            "nobody waits: the echo tells the writer nothing new"
        );
        assert!(w.pending("pm", t0), "a reconcile is put off");
        assert_eq!(
            w.observed(&slice("web.https"), Some("9")),
            Observed::NotAwaited,
            "another writer's version"
        );
        w.answered("pm", slice("web.https"), "10".into(), false, t0);
        assert_eq!(
            w.observed(&slice("web.https"), Some("10")),
            Observed::Echo {
                owner: "pm".into(),
                wake: true
            },
            "the last awaited write wakes the put-off reconcile"
        );
        w.answered("pm", slice("web.http"), "11".into(), false, t0);
        assert_eq!(
            w.observed(&slice("web.http"), Some("11")),
            Observed::Echo {
                owner: "pm".into(),
                wake: false
            },
            "woken once: the next echo is an echo again"
        );
    }

    #[test]
    fn an_expectation_never_met_expires() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.answered("pm", slice("web.http"), "7".into(), false, t0);
        assert!(w.pending("pm", t0 + EXPECTATION_TIMEOUT / 2));
        assert!(!w.pending("pm", t0 + EXPECTATION_TIMEOUT));
        assert!(w.by_slice.is_empty() && w.by_owner.is_empty());
    }

    #[test]
    fn an_echo_before_its_answer_is_held_and_then_known_as_the_echo() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.applying("pm", slice("web.http"), t0);
        // (Asking `pending` here would stand for a put-off reconcile, which the answer wakes.)
        assert!(
            w.by_owner.contains_key("pm"),
            "in flight is not in the cache"
        );
        assert_eq!(
            w.observed(&slice("web.http"), Some("7")),
            Observed::InFlight { owner: "pm".into() }
        );
        assert_eq!(
            w.answered("pm", slice("web.http"), "7".into(), true, t0),
            Answered::Awaited,
            "the held event was the echo"
        );
        assert!(!w.pending("pm", t0), "the write is in the cache");
        assert!(w.by_slice.is_empty() && w.by_owner.is_empty());
    }

    #[test]
    fn another_version_seen_while_in_flight_wakes_the_writer() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.applying("pm", slice("web.http"), t0);
        w.observed(&slice("web.http"), Some("6"));
        w.observed(&slice("web.http"), Some("7"));
        assert_eq!(
            w.answered("pm", slice("web.http"), "7".into(), true, t0),
            Answered::Wake,
            "version 6 was someone else's change"
        );
        assert!(!w.pending("pm", t0));

        w.applying("pm", slice("web.http"), t0);
        w.observed_gone(&slice("web.http"));
        assert!(
            w.pending("pm", t0),
            "a deletion while in flight is held too"
        );
        assert_eq!(
            w.answered("pm", slice("web.http"), "9".into(), false, t0),
            Answered::Wake,
            "someone deleted it"
        );

        w.applying("pm", slice("web.http"), t0);
        w.observed(&slice("web.http"), Some("10"));
        assert_eq!(
            w.apply_failed("pm", &slice("web.http")),
            Answered::Wake,
            "our apply failed: the version seen was someone else's"
        );
        w.applying("pm", slice("web.http"), t0);
        assert_eq!(w.apply_failed("pm", &slice("web.http")), Answered::Awaited);
        assert!(w.by_slice.is_empty() && w.by_owner.is_empty());
    }

    #[test]
    fn an_answer_before_its_event_awaits_the_event() {
        let t0 = Instant::now();
        let mut w = OwnWrites::default();
        w.applying("pm", slice("web.http"), t0);
        assert_eq!(
            w.answered("pm", slice("web.http"), "7".into(), false, t0),
            Answered::Awaited
        );
        assert!(w.pending("pm", t0));
        assert_eq!(
            w.observed(&slice("web.http"), Some("7")),
            Observed::Echo {
                owner: "pm".into(),
                wake: true
            },
            "the reconcile put off by `pending` is woken by it"
        );
    }
}
