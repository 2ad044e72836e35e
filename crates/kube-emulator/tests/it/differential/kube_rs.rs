//! kube-rs request sequences (`Api` with its own parameter encoding): create, replace with a
//! stale resourceVersion, server-side apply conflicts, delete preconditions, list parameters.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};

use super::harness::Pair;

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).expect("serializable")
}

fn lease(name: &str) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}))
    .expect("a lease")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_sequences() {
    let mut p = Pair::new("kube-rs").await;
    p.kube("create a lease", &[], |c, ns| async move {
        let api: Api<Lease> = Api::namespaced(c, &ns);
        api.create(&PostParams::default(), &lease("l"))
            .await
            .map(to_value)
    })
    .await;
    p.kube(
        "replace with a stale resourceVersion",
        &[],
        |c, ns| async move {
            let api: Api<Lease> = Api::namespaced(c, &ns);
            let first = api.get("l").await?;
            let mut next = first.clone();
            next.spec.get_or_insert_default().lease_transitions = Some(1);
            api.replace("l", &PostParams::default(), &next).await?;
            api.replace("l", &PostParams::default(), &first)
                .await
                .map(to_value)
        },
    )
    .await;
    p.kube("apply conflicts and force", &[], |c, ns| async move {
        let api: Api<Lease> = Api::namespaced(c, &ns);
        let doc = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"}, "spec": {"holderIdentity": "b"}});
        let mine = api
            .patch("l", &PatchParams::apply("me"), &Patch::Apply(&doc))
            .await?;
        let theirs = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"}, "spec": {"holderIdentity": "c"}});
        let conflict = api
            .patch("l", &PatchParams::apply("them"), &Patch::Apply(&theirs))
            .await
            .err()
            .map(|e| e.to_string());
        let forced = api
            .patch(
                "l",
                &PatchParams::apply("them").force(),
                &Patch::Apply(&theirs),
            )
            .await?;
        Ok(json!({"mine": mine, "conflict": conflict, "forced": forced}))
    })
    .await;
    p.kube(
        "delete with a stale precondition",
        &[],
        |c, ns| async move {
            let api: Api<Lease> = Api::namespaced(c, &ns);
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some("1".into()),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            api.delete("l", &dp)
                .await
                .map(|e| e.either(to_value, to_value))
        },
    )
    .await;
    p.kube("delete", &[], |c, ns| async move {
        let api: Api<Lease> = Api::namespaced(c, &ns);
        api.delete("l", &DeleteParams::default())
            .await
            .map(|e| e.either(to_value, to_value))
    })
    .await;
    p.kube("create an invalid slice", &[], |c, ns| async move {
        let api: Api<EndpointSlice> = Api::namespaced(c, &ns);
        let bad: EndpointSlice = serde_json::from_value(json!({"metadata": {"name": "s"},
            "addressType": "IPv4", "endpoints": [{"addresses": ["::1"]}]}))
        .expect("a slice");
        api.create(&PostParams::default(), &bad).await.map(to_value)
    })
    .await;
    p.kube("list with a limit", &[], |c, ns| async move {
        let api: Api<Pod> = Api::namespaced(c, &ns);
        let list = api.list(&ListParams::default().limit(1)).await?;
        Ok(json!({"items": list.items.len(), "continue": list.metadata.continue_}))
    })
    .await;
    p.finish();
}
