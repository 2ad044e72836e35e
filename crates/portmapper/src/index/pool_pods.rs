//! One pool's pods, by name, with the list a reconcile reads shared rather than copied.
//!
//! Every reconcile of a PortMapping reads its whole pool. Copying the pool's records out of the
//! index for each one cloned every record's `Arc`: a write to every record, a cache miss per
//! pod (the records lie all over the heap), a twentieth of a pass at 10,000 pods. The list is
//! kept instead, handed out as one `Arc`, and brought up to date in place as pods change.

use std::collections::BTreeMap;
use std::sync::Arc;

use portmapper_core::PodRecord;

/// The pods of one pool (one namespace), by name.
#[derive(Debug, Default)]
pub struct PoolPods {
    by_name: BTreeMap<String, Arc<PodRecord>>,
    /// `by_name`'s records in its order, once read. Changed in place (copied first only while
    /// a reconcile still holds the list it was given).
    list: Option<Arc<Vec<Arc<PodRecord>>>>,
}

impl PoolPods {
    /// Adds or replaces the pod named `pod.name`.
    pub fn insert(&mut self, pod: Arc<PodRecord>) {
        let replaced = self.by_name.insert(pod.name.clone(), pod.clone()).is_some();
        let Some(list) = self.list.as_mut() else {
            return;
        };
        // Ordered as `by_name` is: by the name's bytes.
        match (list.binary_search_by(|p| p.name.cmp(&pod.name)), replaced) {
            (Ok(i), true) => Arc::make_mut(list)[i] = pod,
            (Err(i), false) => Arc::make_mut(list).insert(i, pod),
            // Out of step (cannot happen): made again when next read.
            _ => self.list = None,
        }
    }

    /// Removes the pod named `name`.
    pub fn remove(&mut self, name: &str) {
        if self.by_name.remove(name).is_none() {
            return;
        }
        let Some(list) = self.list.as_mut() else {
            return;
        };
        match list.binary_search_by(|p| p.name.as_str().cmp(name)) {
            Ok(i) => {
                Arc::make_mut(list).remove(i);
            }
            Err(_) => self.list = None,
        }
    }

    /// Whether the pool has no pod.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The pods, by name.
    pub fn list(&mut self) -> Arc<Vec<Arc<PodRecord>>> {
        let by_name = &self.by_name;
        self.list
            .get_or_insert_with(|| Arc::new(by_name.values().cloned().collect()))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, version: &str) -> Arc<PodRecord> {
        Arc::new(PodRecord {
            name: name.to_owned(),
            resource_version: version.to_owned(),
            ..PodRecord::default()
        })
    }

    fn names(list: &[Arc<PodRecord>]) -> Vec<(String, String)> {
        list.iter()
            .map(|p| (p.name.clone(), p.resource_version.clone()))
            .collect()
    }

    #[test]
    fn the_list_follows_every_change_in_name_order_and_is_shared_until_one() {
        let mut pool = PoolPods::default();
        for name in ["c", "a", "b"] {
            pool.insert(pod(name, "1"));
        }
        let first = pool.list();
        assert_eq!(
            names(&first),
            [("a", "1"), ("b", "1"), ("c", "1")].map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert!(
            Arc::ptr_eq(&first, &pool.list()),
            "read again: the same list"
        );

        // Changed while `first` is held: `first` stays what it was.
        pool.insert(pod("b", "2"));
        pool.insert(pod("aa", "1"));
        pool.remove("c");
        pool.remove("zz");
        assert_eq!(names(&first)[1], ("b".to_owned(), "1".to_owned()));
        let now = pool.list();
        assert_eq!(
            names(&now),
            [("a", "1"), ("aa", "1"), ("b", "2")].map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        drop(first);
        // Not held: changed in place, the same allocation.
        let address = Arc::as_ptr(&now);
        drop(now);
        pool.insert(pod("a", "3"));
        let after = pool.list();
        assert_eq!(Arc::as_ptr(&after), address);
        assert_eq!(names(&after)[0], ("a".to_owned(), "3".to_owned()));
        // And it equals a list made afresh.
        let fresh: Vec<_> = pool.by_name.values().cloned().collect();
        assert_eq!(names(&after), names(&fresh));
        pool.remove("a");
        pool.remove("aa");
        pool.remove("b");
        assert!(pool.is_empty());
        assert!(pool.list().is_empty());
    }
}
