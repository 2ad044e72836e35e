//! Fidelity found trying dual-stack Services and bad pods: cluster IPs per family from a
//! dual-stack service range, and Pod container-port / status-IP validation, as kube-apiserver.

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use crate::common::{kubectl_bin, kubectl_stdin};

fn service(name: &str, spec_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{ports: [{{port: 80}}]{spec_extra}}}\n"
    )
}

async fn spec_of(api: &Api<Service>, name: &str) -> (Vec<String>, String, Vec<String>) {
    let spec = api.get(name).await.expect("svc").spec.expect("spec");
    (
        spec.cluster_ips.unwrap_or_default(),
        spec.ip_family_policy.unwrap_or_default(),
        spec.ip_families.unwrap_or_default(),
    )
}

#[tokio::test]
async fn services_get_a_cluster_ip_per_family() {
    let emu = crate::common::emu().await;
    let api: Api<Service> = Api::default_namespaced(emu.client().expect("client"));
    let create = |name: &str, extra: &str| {
        let v: Service = serde_yaml::from_str(&service(name, extra)).expect("yaml");
        v
    };
    let pp = PostParams::default();
    for (name, extra) in [
        ("v4", ""),
        ("v6", ", ipFamilies: [IPv6]"),
        ("prefer", ", ipFamilyPolicy: PreferDualStack"),
        (
            "v6-first",
            ", ipFamilyPolicy: RequireDualStack, ipFamilies: [IPv6, IPv4]",
        ),
        ("given-v6", ", clusterIP: 'fd00:10:96::99'"),
        ("headless", ", clusterIP: None"),
    ] {
        api.create(&pp, &create(name, extra)).await.expect(name);
    }
    let (ips, policy, fams) = spec_of(&api, "v4").await;
    assert!(ips.len() == 1 && ips[0].starts_with("10.96."), "{ips:?}");
    assert_eq!(
        (policy.as_str(), fams),
        ("SingleStack", vec!["IPv4".into()])
    );
    let (ips, policy, fams) = spec_of(&api, "v6").await;
    assert!(
        ips.len() == 1 && ips[0].starts_with("fd00:10:96::"),
        "{ips:?}"
    );
    assert_eq!(
        (policy.as_str(), fams),
        ("SingleStack", vec!["IPv6".into()])
    );
    let (ips, policy, fams) = spec_of(&api, "prefer").await;
    assert!(
        ips[0].starts_with("10.96.") && ips[1].starts_with("fd00:10:96::"),
        "{ips:?}"
    );
    assert_eq!(
        (policy.as_str(), fams),
        ("PreferDualStack", vec!["IPv4".into(), "IPv6".into()])
    );
    let (ips, _, fams) = spec_of(&api, "v6-first").await;
    assert!(
        ips[0].starts_with("fd00:10:96::") && ips[1].starts_with("10.96."),
        "{ips:?}"
    );
    assert_eq!(fams, vec!["IPv6".to_string(), "IPv4".into()]);
    let (ips, _, fams) = spec_of(&api, "given-v6").await;
    assert_eq!(
        (ips, fams),
        (vec!["fd00:10:96::99".into()], vec!["IPv6".into()])
    );
    // Headless without selector: upstream's special case, both families.
    let (ips, policy, fams) = spec_of(&api, "headless").await;
    assert_eq!(
        (ips, policy.as_str(), fams),
        (
            vec!["None".into()],
            "RequireDualStack",
            vec!["IPv4".into(), "IPv6".into()]
        )
    );
    // An update keeps the allocated IPs and the policy.
    let mut v6 = api.get("v6").await.expect("get");
    let before = v6.spec.as_ref().and_then(|s| s.cluster_ips.clone());
    if let Some(s) = v6.spec.as_mut() {
        s.cluster_ip = None;
        s.cluster_ips = None;
        s.ip_families = None;
        s.ip_family_policy = None;
    }
    let after = api.replace("v6", &pp, &v6).await.expect("replace");
    assert_eq!(
        after.spec.as_ref().and_then(|s| s.cluster_ips.clone()),
        before
    );
    assert_eq!(
        after.spec.and_then(|s| s.ip_families),
        Some(vec!["IPv6".to_string()])
    );
}

#[tokio::test]
async fn kubectl_dual_stack_services_and_bad_pods() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let kc = emu.kubeconfig_path();
    let (ok, out, err) = kubectl_stdin(
        &bin,
        kc,
        &["apply", "-f", "-"],
        &service(
            "v6",
            ", ipFamilyPolicy: PreferDualStack, ipFamilies: [IPv6]",
        ),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "service/v6 created");
    let (ok, out, err) = crate::common::kubectl(
        &bin,
        kc,
        &["get", "svc", "v6", "-o", "jsonpath={.spec.clusterIPs}"],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, r#"["fd00:10:96::a","10.96.0.10"]"#);
    let (ok, _, err) = kubectl_stdin(
        &bin,
        kc,
        &["apply", "-f", "-"],
        &service("two", ", ipFamilies: [IPv4, IPv6]"),
    )
    .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        r#"The Service "two" is invalid: spec.ipFamilyPolicy: Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"#
    );
    let (ok, _, err) = kubectl_stdin(
        &bin,
        kc,
        &["apply", "-f", "-"],
        &service("mismatch", ", ipFamilies: [IPv6], clusterIP: 10.96.0.99"),
    )
    .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        r#"The Service "mismatch" is invalid: spec.clusterIPs[0]: Invalid value: "10.96.0.99": expected an IPv6 value as indicated by `ipFamilies[0]`"#
    );
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: nginx\n    ports: [{name: sixteen-chars-ab, containerPort: 80}]\n";
    let (ok, _, err) = kubectl_stdin(&bin, kc, &["apply", "-f", "-"], pod).await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        r#"The Pod "p" is invalid: spec.containers[0].ports[0].name: Invalid value: "sixteen-chars-ab": must be no more than 15 characters"#
    );
    // Protocol is defaulted, so a plain port is fine.
    let (ok, out, err) = kubectl_stdin(
        &bin,
        kc,
        &["apply", "-f", "-"],
        &pod.replace("sixteen-chars-ab", "fifteen-chars-a"),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "pod/p created");
}

#[tokio::test]
async fn pod_status_ips_are_validated() {
    let emu = crate::common::emu().await;
    let api: Api<Pod> = Api::default_namespaced(emu.client().expect("client"));
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    api.create(&PostParams::default(), &p)
        .await
        .expect("create");
    let patch = |status: serde_json::Value| Patch::Merge(serde_json::json!({"status": status}));
    let err = api
        .patch_status(
            "p",
            &PatchParams::default(),
            &patch(serde_json::json!({"podIP": "10.244.53.300"})),
        )
        .await
        .expect_err("invalid IP");
    let kube::Error::Api(s) = err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        r#"Pod "p" is invalid: status.podIPs[0]: Invalid value: "10.244.53.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"#
    );
    let err = api
        .patch_status(
            "p",
            &PatchParams::default(),
            &patch(serde_json::json!({"podIP": "10.244.0.1",
                "podIPs": [{"ip": "10.244.0.1"}, {"ip": "10.244.0.2"}]})),
        )
        .await
        .expect_err("two IPv4");
    assert!(
        err.to_string()
            .contains("may specify no more than one IP for each IP family"),
        "{err}"
    );
    api.patch_status(
        "p",
        &PatchParams::default(),
        &patch(serde_json::json!({"podIP": "10.244.0.1",
            "podIPs": [{"ip": "10.244.0.1"}, {"ip": "fd00:10:244::1"}]})),
    )
    .await
    .expect("dual-stack pod IPs");
}
