//! The names the planner (`portmapper-core`) and the prober (`portmapper-probe`) share for one
//! network check evaluation: which check of a port's list ([`CheckPosition`]) and which
//! (pod, Service port, family, position) a result belongs to ([`NetworkKey`]). Both crates
//! depend on this one, so a key the planner reads is the key the prober writes.

pub use kube_validation::IpFamily;

/// Where a check sits in the port's check list: `index` into the list (`ports[].checks` or
/// `defaultChecks`), and for a check inside `anyOf`, its index there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckPosition {
    /// Index in the port's check list.
    pub index: usize,
    /// Index inside that entry's `anyOf`, if the check is nested there.
    pub any_of: Option<usize>,
}

impl CheckPosition {
    /// A top-level check.
    pub fn top(index: usize) -> Self {
        Self {
            index,
            any_of: None,
        }
    }
}

impl std::fmt::Display for CheckPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.any_of {
            Some(j) => write!(f, "checks[{}].anyOf[{j}]", self.index),
            None => write!(f, "checks[{}]", self.index),
        }
    }
}

/// Identifies one network check evaluation: the planner's lookup key and the prober's schedule
/// key. A pod recreated under the same name has a new UID, hence a new key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetworkKey {
    /// UID of the pod.
    pub pod_uid: String,
    /// Service port name (`""` for an unnamed port).
    pub port_name: String,
    /// Address family probed.
    pub family: IpFamily,
    /// Position of the check.
    pub position: CheckPosition,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_renders_like_a_field_path() {
        assert_eq!(
            CheckPosition {
                index: 2,
                any_of: Some(1)
            }
            .to_string(),
            "checks[2].anyOf[1]"
        );
        assert_eq!(CheckPosition::top(0).to_string(), "checks[0]");
    }
}
