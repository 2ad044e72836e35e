//! One shared copy of the strings that many pod records repeat: namespaces, label and annotation
//! keys and values, node names, phases, conditions' types, statuses, reasons and messages. Each
//! was a string of its own per pod (nine per pod in the scale bench); shared, they cost one
//! allocation each, whatever the number of pods (with the pod index's own keys gone too, the
//! heap at 50,000 pods went from 193 to 130 MB: docs/benchmarks.md, "Heap profile").
//!
//! The table holds every string a live record refers to, and is swept of those no record holds
//! any more (only the table's reference is left) whenever it has doubled since the last sweep:
//! amortised, a sweep costs a constant per string interned. A string unique to one pod (a
//! StatefulSet's pod-name label, say) costs the table's reference and the `Arc`'s counts.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};

/// Entries below which the table is never swept: a sweep of a small table frees nothing worth
/// its scan.
const MIN_SWEEP: usize = 1024;

#[derive(Default)]
struct Table {
    strings: HashSet<Arc<str>>,
    /// Size at which the next sweep runs.
    sweep_at: usize,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(|| {
    Mutex::new(Table {
        strings: HashSet::new(),
        sweep_at: MIN_SWEEP,
    })
});

/// The shared copy of `s`.
pub fn intern(s: &str) -> Arc<str> {
    // A panic while holding the lock leaves the table consistent (a set insert or retain).
    let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(shared) = table.strings.get(s) {
        return shared.clone();
    }
    if table.strings.len() >= table.sweep_at {
        table.strings.retain(|s| Arc::strong_count(s) > 1);
        table.sweep_at = (table.strings.len() * 2).max(MIN_SWEEP);
    }
    let shared: Arc<str> = Arc::from(s);
    table.strings.insert(shared.clone());
    shared
}

/// `Some` of the shared copy.
pub fn intern_opt(s: Option<String>) -> Option<Arc<str>> {
    s.map(|s| intern(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_allocation() {
        let a = intern("interned-test-a");
        let b = intern(&String::from("interned-test-a"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "interned-test-a");
        assert!(!Arc::ptr_eq(&a, &intern("interned-test-b")));
    }

    #[test]
    fn strings_no_one_holds_are_swept_as_the_table_grows() {
        let kept = intern("interned-test-kept");
        for i in 0..4 * MIN_SWEEP {
            drop(intern(&format!("interned-test-dropped-{i}")));
        }
        let table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        assert!(table.strings.len() < 3 * MIN_SWEEP, "swept");
        assert!(table.strings.contains("interned-test-kept"));
        drop(table);
        assert!(Arc::ptr_eq(&kept, &intern("interned-test-kept")));
    }
}
