//! What each PortMapping's last accepted pass asked of the probe budget, so a namespace's
//! budget can count its other PortMappings without planning them again. Counted as declared
//! (network check positions × pods × families, [`portmapper_core::budget`]), the figure users
//! can compute, not as deduplicated prober targets.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use portmapper_probe::MappingKey;

/// Probe targets per PortMapping, as its last pass within budget declared them.
#[derive(Default)]
pub struct Demands(Mutex<HashMap<MappingKey, usize>>);

impl Demands {
    /// Records `mapping`'s probe targets (0: forgets it).
    pub fn set(&self, mapping: &MappingKey, targets: usize) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if targets == 0 {
            all.remove(mapping);
        } else {
            all.insert(mapping.clone(), targets);
        }
    }

    /// The probe targets of `except`'s namespace's other PortMappings.
    pub fn others(&self, except: &MappingKey) -> usize {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter()
            .filter(|(k, _)| k.namespace == except.namespace && *k != except)
            .map(|(_, n)| *n)
            .fold(0, usize::saturating_add)
    }

    /// Keeps only the PortMappings `keep` accepts.
    pub fn retain(&self, keep: impl Fn(&MappingKey) -> bool) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_counts_its_other_portmappings_only() {
        let d = Demands::default();
        let (a1, a2, b1) = (
            MappingKey::new("a", "one"),
            MappingKey::new("a", "two"),
            MappingKey::new("b", "one"),
        );
        d.set(&a1, 32);
        d.set(&a2, 16);
        d.set(&b1, 1_000);
        assert_eq!(d.others(&a1), 16);
        assert_eq!(d.others(&MappingKey::new("a", "new")), 48);
        d.set(&a2, 0);
        assert_eq!(
            d.others(&a1),
            0,
            "a stalled or forgotten PortMapping counts nothing"
        );
        d.retain(|k| k.namespace == "a");
        assert_eq!(d.others(&MappingKey::new("b", "new")), 0);
    }
}
