//! kubectl's typed generators and `auth can-i`, which send protobuf request bodies
//! (`application/vnd.kubernetes.protobuf`), against the emulator.

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use kube::Api;

use crate::common::{kubectl, kubectl_bin};

macro_rules! kc {
    ($bin:expr, $emu:expr, $($arg:expr),+) => {{
        let (ok, out, err) = kubectl(&$bin, $emu.kubeconfig_path(), &[$($arg),+]).await;
        assert!(ok, "kubectl {:?} failed: {err}\n{out}", [$($arg),+]);
        out
    }};
}

#[tokio::test]
async fn kubectl_create_generators_store_what_json_would() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let client = emu.client().expect("client");
    assert_eq!(
        kc!(bin, emu, "create", "namespace", "x").trim(),
        "namespace/x created"
    );
    assert_eq!(
        kc!(
            bin,
            emu,
            "create",
            "configmap",
            "c",
            "-n",
            "x",
            "--from-literal=a=b",
            "--from-literal=empty="
        )
        .trim(),
        "configmap/c created"
    );
    assert_eq!(
        kc!(
            bin,
            emu,
            "create",
            "secret",
            "generic",
            "s",
            "-n",
            "x",
            "--from-literal=p=q"
        )
        .trim(),
        "secret/s created"
    );
    assert_eq!(
        kc!(
            bin,
            emu,
            "create",
            "secret",
            "docker-registry",
            "reg",
            "-n",
            "x",
            "--docker-server=registry.example",
            "--docker-username=u",
            "--docker-password=p"
        )
        .trim(),
        "secret/reg created"
    );
    assert_eq!(
        kc!(
            bin,
            emu,
            "create",
            "service",
            "clusterip",
            "web",
            "-n",
            "x",
            "--tcp=80:8080"
        )
        .trim(),
        "service/web created"
    );
    assert_eq!(
        kc!(
            bin,
            emu,
            "create",
            "service",
            "nodeport",
            "np",
            "-n",
            "x",
            "--tcp=81:8081",
            "--node-port=30081"
        )
        .trim(),
        "service/np created"
    );
    assert_eq!(
        kc!(
            bin,
            emu,
            "create",
            "service",
            "externalname",
            "ext",
            "-n",
            "x",
            "--external-name=db.example.com"
        )
        .trim(),
        "service/ext created"
    );
    assert_eq!(
        kc!(bin, emu, "create", "serviceaccount", "sa", "-n", "x").trim(),
        "serviceaccount/sa created"
    );
    // Server-side dry run through the same path stores nothing.
    assert_eq!(
        kc!(
            bin,
            emu,
            "create",
            "configmap",
            "dry",
            "-n",
            "x",
            "--dry-run=server"
        )
        .trim(),
        "configmap/dry created (server dry run)"
    );

    let cm = Api::<ConfigMap>::namespaced(client.clone(), "x")
        .get("c")
        .await
        .expect("cm");
    let data = cm.data.expect("data");
    assert_eq!(data.get("a").map(String::as_str), Some("b"));
    assert_eq!(data.get("empty").map(String::as_str), Some(""));
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), "x")
            .get_opt("dry")
            .await
            .expect("get")
            .is_none()
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), "x");
    let s = secrets.get("s").await.expect("secret");
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(s.data.expect("data")["p"].0, b"q");
    let reg = secrets.get("reg").await.expect("secret");
    assert_eq!(reg.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    let services = Api::<Service>::namespaced(client.clone(), "x");
    let web = services.get("web").await.expect("svc").spec.expect("spec");
    let json = serde_json::to_value(&web.ports).expect("json");
    assert_eq!(
        json,
        serde_json::json!([{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}])
    );
    assert_eq!(web.type_.as_deref(), Some("ClusterIP"));
    assert!(web.cluster_ip.is_some_and(|ip| ip.starts_with("10.96.")));
    let np = services.get("np").await.expect("svc").spec.expect("spec");
    assert_eq!(np.ports.expect("ports")[0].node_port, Some(30081));
    let ext = services.get("ext").await.expect("svc").spec.expect("spec");
    assert_eq!(ext.external_name.as_deref(), Some("db.example.com"));
    assert_eq!(ext.cluster_ip, None);
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), "x")
        .get("sa")
        .await
        .expect("sa");
    assert_eq!(sa.metadata.namespace.as_deref(), Some("x"));

    // Errors come back as upstream's, decoded by kubectl from the JSON Status.
    let (ok, _, err) = kubectl(
        &bin,
        emu.kubeconfig_path(),
        &["create", "configmap", "c", "-n", "x"],
    )
    .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "error: failed to create configmap: configmaps \"c\" already exists"
    );
    let (ok, _, err) = kubectl(
        &bin,
        emu.kubeconfig_path(),
        &["create", "namespace", "Bad_Name"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("The Namespace \"Bad_Name\" is invalid"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_auth_can_i_is_always_allowed() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    assert_eq!(kc!(bin, emu, "auth", "can-i", "get", "pods").trim(), "yes");
    assert_eq!(
        kc!(
            bin,
            emu,
            "auth",
            "can-i",
            "delete",
            "nodes",
            "--all-namespaces"
        )
        .trim(),
        "yes"
    );
    assert_eq!(
        kc!(bin, emu, "auth", "can-i", "get", "/healthz").trim(),
        "yes"
    );
    let out = kc!(bin, emu, "auth", "can-i", "--list", "-n", "default");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec![
                "Resources",
                "Non-Resource",
                "URLs",
                "Resource",
                "Names",
                "Verbs"
            ],
            vec!["*.*", "[]", "[]", "[*]"],
            vec!["[*]", "[]", "[*]"],
        ],
        "{out}"
    );
}

#[tokio::test]
async fn kubectl_versions_create_namespace_over_protobuf() {
    let Some(_) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let mut tried = 0;
    for bin in crate::common::versioned_kubectls() {
        let minor = bin.rsplit('.').next().unwrap_or_default().to_string();
        tried += 1;
        let ns = format!("v{minor}");
        let (ok, out, err) =
            kubectl(&bin, emu.kubeconfig_path(), &["create", "namespace", &ns]).await;
        assert!(
            ok && out.trim() == format!("namespace/{ns} created"),
            "{bin}: {out} {err}"
        );
        let (ok, out, err) = kubectl(
            &bin,
            emu.kubeconfig_path(),
            &["auth", "can-i", "list", "secrets"],
        )
        .await;
        assert!(ok && out.trim() == "yes", "{bin}: {out} {err}");
    }
    eprintln!("typed generators: {tried} versioned kubectl binaries exercised");
}
