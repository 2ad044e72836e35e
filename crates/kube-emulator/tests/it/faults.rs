//! Fault injection: one test per catalogue entry of docs/emulator-spec.md §7.2, asserting the wire
//! behaviour and kube's reaction (§7.3).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube_emulator::History;
use kube_emulator::faults::{DropMode, FaultAction, Rule};
use serde_json::{Value, json};

use crate::common::{emu, name_and, pairs, raw};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name},"data":{"k":"v"}}),
    )
    .unwrap()
}

fn status(code: u16, retry: Option<u64>) -> FaultAction {
    FaultAction::Status {
        code,
        reason: None,
        message: None,
        retry_after_seconds: retry,
    }
}

fn lists(emu: &kube_emulator::Emulator) -> usize {
    emu.requests()
        .filter(|r| r.verb == "list" && r.resource == "configmaps")
        .len()
}

#[tokio::test]
async fn latency_delays_the_request() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    emu.inject(
        Rule::new(FaultAction::Delay)
            .verbs(&["list"])
            .delay_ms(3000)
            .times(1),
    );
    let t = Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    // A lower bound: load only makes it hold more surely.
    assert!(t.elapsed() >= Duration::from_millis(3000));
    let t = Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    // Correctness bound: a second delayed list takes 3 s; an undelayed one on loopback takes
    // milliseconds, well under 3 s even on a loaded 2-core machine.
    assert!(
        t.elapsed() < Duration::from_millis(3000),
        "rule expired after 1 use"
    );
}

#[tokio::test]
async fn status_429_carries_retry_after_and_kube_retries_transparently() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    emu.inject(
        Rule::new(status(429, Some(1)))
            .verbs(&["get"])
            .name("a")
            .times(1),
    );
    // Wire: 429, Retry-After header, details.retryAfterSeconds.
    let (code, body) = raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        &[],
        "",
    )
    .await;
    assert_eq!(code, 429);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["reason"], "TooManyRequests");
    assert_eq!(v["details"]["retryAfterSeconds"], 1);
    emu.inject(
        Rule::new(status(503, Some(0)))
            .verbs(&["get"])
            .name("a")
            .times(2),
    );
    let got = api
        .get("a")
        .await
        .expect("503s are retried by kube's default retry policy");
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    let gets = emu
        .requests()
        .filter(|r| r.verb == "get" && r.name == "a")
        .len();
    assert_eq!(gets, 4, "1 raw + 2 injected 503 + 1 success");
}

#[tokio::test]
async fn status_500_is_surfaced_not_retried() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    emu.inject(Rule::new(status(500, None)).verbs(&["list"]).times(1));
    let err = api.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500 && s.reason == "InternalError"),
        "{err:?}"
    );
    assert_eq!(lists(&emu), 1);
}

#[tokio::test]
async fn slow_body_hangs_clients_without_read_timeout() {
    let emu = emu().await;
    emu.inject(
        Rule::new(FaultAction::SlowBody { ms: 10_000 })
            .verbs(&["list"])
            .times(1),
    );
    let mut cfg = emu.kube_config().unwrap();
    cfg.read_timeout = Some(Duration::from_millis(300));
    let api: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(cfg).unwrap(), "default");
    let t = Instant::now();
    let err = api.list(&ListParams::default()).await.unwrap_err();
    // Correctness bound: the 300 ms read timeout, not the 10 s body, ended the request.
    assert!(
        t.elapsed() < Duration::from_secs(9),
        "read timeout fired first: {err:?}"
    );
}

#[tokio::test]
async fn stale_write_makes_the_clients_rv_genuinely_stale() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let c = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    emu.inject(
        Rule::new(FaultAction::StaleWrite)
            .verbs(&["update"])
            .times(1),
    );
    let err = api
        .replace("a", &PostParams::default(), &c)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    let now = api.get("a").await.unwrap();
    assert_ne!(
        now.metadata.resource_version, c.metadata.resource_version,
        "a real concurrent write happened"
    );
    assert_eq!(
        now.metadata.annotations.unwrap()["kube-emulator/stale-write"],
        "1"
    );
    // Re-read and retry works.
    api.replace("a", &PostParams::default(), &api.get("a").await.unwrap())
        .await
        .unwrap();
    // Plain injected conflict status.
    emu.inject(
        Rule::new(FaultAction::ConflictStatus)
            .verbs(&["patch"])
            .times(1),
    );
    let err = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data":{"x":"y"}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 409));
}

#[tokio::test]
async fn already_exists_race() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    emu.inject(
        Rule::new(FaultAction::AlreadyExistsRace)
            .verbs(&["create"])
            .times(1),
    );
    let err = api
        .create(&PostParams::default(), &cm("a"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );
    assert!(api.get_opt("a").await.unwrap().is_some());
}

async fn watch_drop_then_resume(mode: DropMode) {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    emu.inject(
        Rule::new(FaultAction::WatchDrop {
            after_events: Some(1),
            after_ms: None,
            mode,
        })
        .watch(true)
        .resource("", "configmaps")
        .times(1),
    );
    let mut s = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    let mut errors = 0;
    let producer = {
        let api = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            for n in ["a", "b", "c"] {
                api.create(&PostParams::default(), &cm(n)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 {
        assert!(Instant::now() < deadline, "missed events: {seen:?}");
        match tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .unwrap()
        {
            Some(Ok(watcher::Event::Apply(o))) => seen.push(o.metadata.name.unwrap()),
            Some(Ok(_)) => {}
            Some(Err(_)) => errors += 1,
            None => panic!("ended"),
        }
    }
    producer.await.unwrap();
    assert_eq!(
        seen,
        vec!["a", "b", "c"],
        "no event lost or duplicated across the drop"
    );
    assert_eq!(
        lists(&emu),
        1,
        "a dropped watch resumes from its RV without relisting ({mode:?})"
    );
    let watches = emu.requests().filter(|r| r.verb == "watch").len();
    assert!(watches >= 2, "re-watched after the drop");
    if mode == DropMode::Clean {
        assert_eq!(errors, 0, "a clean end of stream is not an error");
    }
}

#[tokio::test]
async fn watch_drop_clean() {
    watch_drop_then_resume(DropMode::Clean).await;
}

#[tokio::test]
async fn watch_drop_abrupt() {
    watch_drop_then_resume(DropMode::Abrupt).await;
}

#[tokio::test]
async fn watch_drop_mid_line() {
    watch_drop_then_resume(DropMode::MidLine).await;
}

#[tokio::test]
async fn watch_gone_forces_relist() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    emu.inject(
        Rule::new(FaultAction::WatchGone { after_events: 0 })
            .watch(true)
            .times(1),
    );
    let mut s = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut inits = 0;
    let mut got_410 = false;
    while inits < 2 {
        match tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .unwrap()
            .unwrap()
        {
            Ok(watcher::Event::InitDone) => inits += 1,
            Err(watcher::Error::WatchError(st)) => {
                assert_eq!(st.code, 410);
                got_410 = true;
            }
            _ => {}
        }
    }
    assert!(got_410);
    assert_eq!(lists(&emu), 2, "exactly one relist");
}

#[tokio::test]
async fn watch_stall_sends_nothing_until_client_idle_timeout() {
    let emu = emu().await;
    emu.inject(Rule::new(FaultAction::WatchStall).watch(true).times(1));
    let (code, body) = raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=1",
        &[],
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        body.is_empty(),
        "stalled watch sends no events and no bookmarks: {body}"
    );
}

#[tokio::test]
async fn bookmark_control_disable_and_lag() {
    let emu = emu().await;
    emu.inject(
        Rule::new(FaultAction::Bookmarks {
            disabled: true,
            interval_ms: None,
            lag: 0,
        })
        .watch(true)
        .times(1),
    );
    let (_, body) = raw(&emu, "GET", "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=1", &[], "").await;
    assert!(!body.contains("BOOKMARK"), "{body}");
    emu.inject(
        Rule::new(FaultAction::Bookmarks {
            disabled: false,
            interval_ms: Some(100),
            lag: 2,
        })
        .watch(true)
        .times(1),
    );
    let rv = emu.resource_version();
    let (_, body) = raw(&emu, "GET", "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=1", &[], "").await;
    let bm: Value = serde_json::from_str(
        body.lines()
            .find(|l| l.contains("BOOKMARK"))
            .expect("bookmark"),
    )
    .unwrap();
    assert_eq!(
        bm["object"]["metadata"]["resourceVersion"],
        (rv - 2).to_string()
    );
}

#[tokio::test]
async fn event_delay_makes_informers_lag() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    emu.inject(
        Rule::new(FaultAction::EventDelay { ms: 500 })
            .watch(true)
            .times(1),
    );
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let t = Instant::now();
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    loop {
        if let WatchEvent::Added(_) = s.try_next().await.unwrap().unwrap() {
            break;
        }
    }
    assert!(t.elapsed() >= Duration::from_millis(500));
}

#[tokio::test]
async fn restart_keep_history_resumes_drop_history_relists() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let mut s = watcher(api.clone(), watcher::Config::default()).boxed();
    let next_apply = async |s: &mut futures::stream::BoxStream<
        '_,
        Result<watcher::Event<ConfigMap>, watcher::Error>,
    >| loop {
        match tokio::time::timeout(Duration::from_secs(15), s.next())
            .await
            .unwrap()
            .unwrap()
        {
            Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => {
                return o.metadata.name.unwrap();
            }
            _ => {}
        }
    };
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert_eq!(next_apply(&mut s).await, "a");
    // Keep history: a network blip. Connections are refused while down.
    let restart = emu.restart(Duration::from_millis(1500), History::Keep);
    let probe = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        tokio::net::TcpStream::connect(emu.addr()).await.is_err()
    };
    let ((), refused) = tokio::join!(restart, probe);
    assert!(refused, "connection refused during the restart window");
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    assert_eq!(next_apply(&mut s).await, "b");
    assert_eq!(lists(&emu), 1, "history kept: the watch resumes");
    // Drop history: resumed watches get 410 and relist.
    emu.restart(Duration::from_millis(100), History::Drop).await;
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    let mut names = Vec::new();
    while !names.contains(&"c".to_string()) {
        names.push(next_apply(&mut s).await);
    }
    assert_eq!(lists(&emu), 2, "history dropped: one relist");
}

#[tokio::test]
async fn admin_http_api_rules_counts_snapshot() {
    let emu = emu().await;
    let rule = r#"{"match":{"verbs":["create"],"resource":"configmaps","name":"x-*"},"action":{"type":"status","code":500},"times":1}"#;
    let (code, body) = raw(
        &emu,
        "POST",
        "/__emu/faults",
        &[("Content-Type", "application/json")],
        rule,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    assert!(
        api.create(&PostParams::default(), &cm("x-1"))
            .await
            .is_err()
    );
    api.create(&PostParams::default(), &cm("x-2"))
        .await
        .unwrap();
    api.patch(
        "x-2",
        &PatchParams::apply("my-op").force(),
        &Patch::Apply(json!({"apiVersion":"v1","kind":"ConfigMap","data":{"k":"z"}})),
    )
    .await
    .unwrap();
    let (_, body) = raw(&emu, "GET", "/__emu/counts", &[], "").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["writes"]["my-op"], 1);
    assert_eq!(emu.requests().writes_by_manager("my-op"), 1);
    let (_, snap) = raw(&emu, "GET", "/__emu/snapshot", &[], "").await;
    api.delete("x-2", &Default::default()).await.unwrap();
    let rv_before = emu.resource_version();
    let (code, _) = raw(
        &emu,
        "POST",
        "/__emu/restore",
        &[("Content-Type", "application/json")],
        &snap,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        api.get("x-2").await.unwrap().data.unwrap()["k"],
        "z",
        "restored"
    );
    assert!(emu.resource_version() > rv_before, "RV never goes back");
}

#[tokio::test]
async fn readiness_fault() {
    let emu = emu().await;
    assert_eq!(
        raw(&emu, "GET", "/readyz", &[], "").await,
        (200, "ok".to_string())
    );
    let (code, _) = raw(
        &emu,
        "POST",
        "/__emu/ready",
        &[("Content-Type", "application/json")],
        r#"{"ready":false}"#,
    )
    .await;
    assert_eq!(code, 200);
    let (code, body) = raw(&emu, "GET", "/readyz", &[], "").await;
    assert_eq!(code, 500);
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    assert_eq!(
        raw(&emu, "GET", "/healthz", &[], "").await.0,
        200,
        "liveness unaffected"
    );
    emu.set_ready(true);
    assert_eq!(raw(&emu, "GET", "/readyz", &[], "").await.0, 200);
}

/// docs/emulator-spec.md §7.4 recipe 5: a permanent 500 on list must not turn into a hot loop.
#[tokio::test]
async fn permanent_list_failure_backs_off() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    emu.inject(
        Rule::new(status(500, None))
            .verbs(&["list"])
            .resource("", "configmaps"),
    );
    let s =
        kube::runtime::WatchStreamExt::default_backoff(watcher(api, watcher::Config::default()));
    let task = tokio::spawn(async move {
        let mut s = s.boxed();
        while s.next().await.is_some() {}
    });
    tokio::time::sleep(Duration::from_secs(6)).await;
    task.abort();
    let at = |r: &kube_emulator::reqlog::LoggedRequest| r.since_start.as_secs_f64();
    let all = emu
        .requests()
        .filter(|r| r.verb == "list" && r.status == 500);
    let start = at(&all[0]);
    let late = all.iter().filter(|r| at(r) - start >= 3.0).count();
    assert!(all.len() >= 3, "it keeps retrying: {}", all.len());
    assert!(
        late <= 6,
        "≤ 2 lists/s after the first seconds, got {late} in the last 3 s"
    );
}

#[tokio::test]
async fn watch_error_event_other_than_410_rewatches_without_relist() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    emu.inject(
        Rule::new(FaultAction::WatchError {
            code: 500,
            after_events: 0,
        })
        .watch(true)
        .times(1),
    );
    let mut s = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut saw_500 = false;
    let creator = {
        let api = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            api.create(&PostParams::default(), &cm("after"))
                .await
                .unwrap();
        })
    };
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .unwrap()
            .unwrap()
        {
            Err(watcher::Error::WatchError(st)) => {
                assert_eq!(st.code, 500);
                saw_500 = true;
            }
            Ok(watcher::Event::Apply(o)) if o.metadata.name.as_deref() == Some("after") => break,
            _ => {}
        }
    }
    creator.await.unwrap();
    assert!(saw_500);
    assert_eq!(lists(&emu), 1, "an ERROR other than 410 does not relist");
}

/// a and b, then a modified and c created (two revisions after `old_rv`).
async fn two_revisions_of_news(api: &Api<ConfigMap>, emu: &kube_emulator::Emulator) -> u64 {
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    let old_rv = emu.resource_version();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data":{"k":"new"}})),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    assert_eq!(emu.resource_version(), old_rv + 2);
    old_rv
}

#[tokio::test]
async fn stale_list_serves_resource_version_0_reads_from_an_older_snapshot() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let old_rv = two_revisions_of_news(&api, &emu).await;
    // Through the admin API, as a test harness outside the process would.
    let (code, body) = raw(
        &emu,
        "POST",
        "/__emu/faults",
        &[("Content-Type", "application/json")],
        r#"{"match":{"verbs":["list","get"],"resource":"configmaps"},"action":{"type":"staleList","revisions":2}}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let list = api.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(list.metadata.resource_version, Some(old_rv.to_string()));
    let got: Vec<_> = list.items.iter().map(|o| name_and("k", o)).collect();
    assert_eq!(got, pairs(&[("a", "v"), ("b", "v")]));
    // get with resourceVersion=0: the old a, and c did not exist yet.
    let a = api
        .get_with("a", &kube::api::GetParams::any())
        .await
        .unwrap();
    assert_eq!(a.data.unwrap()["k"], "v");
    let c = api.get_with("c", &kube::api::GetParams::any()).await;
    assert!(
        matches!(&c, Err(kube::Error::Api(s)) if s.code == 404),
        "{c:?}"
    );
    // Consistent reads (no resourceVersion) are not affected by the rule.
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "new");
    let fresh = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(fresh.items.len(), 3);
    assert_eq!(
        fresh.metadata.resource_version,
        Some(emu.resource_version().to_string())
    );
}

#[tokio::test]
async fn watcher_whose_initial_list_is_stale_converges_through_its_watch() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    two_revisions_of_news(&api, &emu).await;
    emu.inject(
        Rule::new(FaultAction::StaleList { revisions: 2 })
            .verbs(&["list"])
            .resource("", "configmaps")
            .times(1),
    );
    // `any_semantic` sends resourceVersion=0 only without a page size (kube-runtime 5.0).
    let mut cfg = watcher::Config::default().any_semantic();
    cfg.page_size = None;
    let mut s = watcher(api.clone(), cfg).boxed();
    let mut initial = Vec::new();
    let mut later = Vec::new();
    let mut done = false;
    while later.len() < 2 {
        let ev = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("event in time")
            .expect("stream open")
            .expect("no watcher error");
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => initial.push(name_and("k", &o)),
            watcher::Event::InitDone => done = true,
            watcher::Event::Apply(o) if done => later.push(name_and("k", &o)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, pairs(&[("a", "v"), ("b", "v")]), "the stale list");
    assert_eq!(
        later,
        pairs(&[("a", "new"), ("c", "v")]),
        "the watch from the stale RV"
    );
    assert_eq!(emu.faults().list().len(), 0, "the rule fired once");
}
