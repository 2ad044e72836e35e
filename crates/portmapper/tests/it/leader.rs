//! Leader election: two controller instances, one writer; the standby takes over on release.

use std::time::Duration;

use kube::Client;
use portmapper::cli::LeaderArgs;
use portmapper::controller::{self, Settings};
use portmapper::http::Readiness;
use portmapper::leader::Election;
use portmapper::metrics::Metrics;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::harness::*;

struct Instance {
    election: Option<Election>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

async fn instance(client: Client, identity: &str) -> Instance {
    let args = LeaderArgs {
        leader_elect: true,
        lease_name: "portmapper".into(),
        lease_namespace: NS.into(),
        lease_duration_seconds: 3,
        lease_grace_seconds: 1,
        identity: Some(identity.into()),
    };
    let election = Election::start(client.clone(), &args)
        .await
        .expect("election starts");
    let shutdown = CancellationToken::new();
    let settings = Settings {
        namespace: None,
        concurrency: 2,
        resync: Duration::from_secs(2),
        node_lookups: false,
        instance: Some(identity.into()),
        probe_concurrency: 4,
    };
    let (leadership, stop) = (election.leadership(), shutdown.clone());
    let task = tokio::spawn(async move {
        controller::run(
            client,
            settings,
            leadership,
            Metrics::new(),
            Readiness::default(),
            stop,
        )
        .await
        .expect("controller runs");
    });
    Instance {
        election: Some(election),
        shutdown,
        task,
    }
}

impl Instance {
    fn is_leader(&self) -> bool {
        self.election
            .as_ref()
            .is_some_and(|e| e.leadership().is_leader())
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        if let Some(e) = self.election.take() {
            e.release(Duration::from_secs(5)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_the_standby_takes_over() {
    let h = Harness::new().await;
    let a = instance(h.client.clone(), "replica-a").await;
    let b = instance(h.client.clone(), "replica-b").await;
    let leader = eventually("a leader", Duration::from_secs(20), || async {
        match (a.is_leader(), b.is_leader()) {
            (true, false) => Some('a'),
            (false, true) => Some('b'),
            _ => None,
        }
    })
    .await;
    let (leader, standby) = if leader == 'a' { (a, b) } else { (b, a) };

    h.create(service("web", &[("http", 8080)])).await;
    h.create(pod("pod-a", "web", "http")).await;
    h.set_pod_status("pod-a", &["10.244.0.1"], true).await;
    h.create(portmapping("web", "web")).await;
    eventually(
        "published by the leader",
        Duration::from_secs(15),
        || async {
            (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]).then_some(())
        },
    )
    .await;

    // The leader goes away (SIGTERM path: stop, then release the Lease).
    leader.stop().await;
    eventually(
        "standby becomes leader",
        Duration::from_secs(20),
        || async { standby.is_leader().then_some(()) },
    )
    .await;
    h.create(pod("pod-b", "web", "http")).await;
    h.set_pod_status("pod-b", &["10.244.0.2"], true).await;
    eventually(
        "the new leader publishes changes",
        Duration::from_secs(15),
        || async {
            (h.membership("web").await.get("web.http")?
                == &vec!["pod-a".to_string(), "pod-b".to_string()])
                .then_some(())
        },
    )
    .await;
    standby.stop().await;
}
