//! Which PortMapping publishes a Service that several name: the oldest (creation time, then
//! name), and never one being deleted. One rule, used by the operator's index and by
//! `portmapper render`, so the live answer and the offline preview cannot differ.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A PortMapping's place among the claims on its Service: lower ranks first.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimRank {
    /// Creation time in whole seconds: the precision the API server stores, so a manifest
    /// with a finer time ranks as its stored object will.
    created: Option<i64>,
    /// Breaks ties within a second (names are unique in a namespace).
    name: String,
}

impl ClaimRank {
    /// The rank of the PortMapping with this metadata.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            created: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

/// The claim that publishes the Service, given every claim on it as (key, rank, being
/// deleted); `None` when every claimant is being deleted.
pub fn publisher<'r, K>(claims: impl IntoIterator<Item = (K, &'r ClaimRank, bool)>) -> Option<K> {
    claims
        .into_iter()
        .filter(|(_, _, deleting)| !deleting)
        .min_by(|(_, a, _), (_, b, _)| a.cmp(b))
        .map(|(key, _, _)| key)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn rank(name: &str, millis: i64) -> ClaimRank {
        ClaimRank::of(&ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: Some(Time(Timestamp::from_millisecond(millis).expect("time"))),
            ..ObjectMeta::default()
        })
    }

    #[test]
    fn the_oldest_publishes_and_a_second_is_one_instant() {
        let (a, b, c) = (rank("a", 20_000), rank("b", 10_900), rank("c", 10_100));
        // b and c were created in the same second: the name decides, not the milliseconds
        // (the API server would have stored both as 10 s).
        assert_eq!(
            publisher([("a", &a, false), ("b", &b, false), ("c", &c, false)]),
            Some("b")
        );
        assert_eq!(
            publisher([("a", &a, false), ("b", &b, true), ("c", &c, false)]),
            Some("c")
        );
        assert_eq!(publisher([("a", &a, true)]), None);
    }
}
