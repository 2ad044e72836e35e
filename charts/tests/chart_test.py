#!/usr/bin/env python3
"""Chart tests with the real Helm engine (helm-python-sdk: Helm's Go SDK through its C ABI).

    python charts/tests/chart_test.py check            # every chart test; exit 1 on any failure
    python charts/tests/chart_test.py render [--namespace NS] [--values JSON]
                                                       # rendered objects as a JSON array (for
                                                       # tests/e2e/chart.rs and rbac.rs)

`check` renders and lints the chart with default values and with every documented option,
asserts what each option does to the manifests, and asserts that invalid values are rejected
(by values.schema.json or by the chart's own cross-field checks). It also keeps the chart's
crds/ identical to the repository's crds/ and every values key documented in docs/install.md.
It also runs the Argo CD health check Lua from docs/install.md in Lua 5.1 (PyPI `lupa`).
Only the standard library, helm_python and lupa are used (the Makefile installs both).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python as helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "portmapper"
RELEASE = "portmapper"
NAMESPACE = "portmapper-system"

Obj = dict[str, Any]


def render(values: Obj | None = None, namespace: str = NAMESPACE, name: str = RELEASE) -> list[Obj]:
    """Renders the chart and parses every document (with Helm's own YAML parser)."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name=name, namespace=namespace, is_install=True)
    objects: list[Obj] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in re.split(r"^---\s*$", text, flags=re.MULTILINE):
            if not doc.strip() or all(
                not line.strip() or line.lstrip().startswith("#") for line in doc.splitlines()
            ):
                continue
            obj = helm.values_from_yaml(doc)
            if obj:
                objects.append(obj)
    return objects


def notes(values: Obj | None = None) -> str:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def lint_findings(values: Obj | None = None) -> list[str]:
    """Lint warnings and errors (info-level findings such as 'icon is recommended' pass)."""
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.33.0")
    found = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    return found + list(report["errors"])


def kinds(objs: list[Obj]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objs)


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {kinds(objs)}"
    return found[0]


def none_of(objs: list[Obj], kind: str) -> None:
    assert not [o for o in objs if o["kind"] == kind], f"unexpected {kind}: {kinds(objs)}"


def container(objs: list[Obj]) -> Obj:
    return one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env(objs: list[Obj]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objs)["env"]}


def rules(objs: list[Obj]) -> set[tuple[str, str, str, str, str]]:
    """(role kind, namespace, group, resource, verb) for every rule of every (Cluster)Role."""
    out = set()
    for o in objs:
        if o["kind"] not in ("Role", "ClusterRole"):
            continue
        for r in o.get("rules", []):
            for g in r["apiGroups"]:
                for res in r["resources"]:
                    for v in r["verbs"]:
                        out.add((o["kind"], o["metadata"].get("namespace", ""), g, res, v))
    return out


def leaf_paths(values: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every leaf of values.yaml (lists and empty maps are leaves)."""
    if isinstance(values, dict) and values:
        out = []
        for k, v in values.items():
            out += leaf_paths(v, f"{prefix}.{k}" if prefix else k)
        return out
    return [prefix]


# ---------------------------------------------------------------------------------------------
# Checks on the default render.

STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


def check_defaults() -> None:
    objs = render()
    assert kinds(objs) == sorted(
        [
            ("ClusterRole", "portmapper"),
            ("ClusterRole", "portmapper-edit"),
            ("ClusterRole", "portmapper-nodes"),
            ("ClusterRole", "portmapper-view"),
            ("ClusterRoleBinding", "portmapper"),
            ("ClusterRoleBinding", "portmapper-nodes"),
            ("Deployment", "portmapper"),
            ("PodDisruptionBudget", "portmapper"),
            ("Role", "portmapper-leader-election"),
            ("RoleBinding", "portmapper-leader-election"),
            ("Service", "portmapper-metrics"),
            ("ServiceAccount", "portmapper"),
        ]
    ), kinds(objs)
    for o in objs:
        labels = o["metadata"].get("labels", {})
        missing = [label for label in STANDARD_LABELS if label not in labels]
        assert not missing, f"{o['kind']}/{o['metadata']['name']} lacks {missing}"
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]
    # Pods: read, and only the status subresource patched (the publication gate condition);
    # never the pod object itself.
    pod_rules = {r for r in rules(objs) if r[3].startswith("pods")}
    assert pod_rules == {
        ("ClusterRole", "", "", "pods", "list"),
        ("ClusterRole", "", "", "pods", "watch"),
        ("ClusterRole", "", "", "pods/status", "patch"),
    }, pod_rules
    # The user roles: aggregated into admin/edit (manage) and view (read), bound to no one.
    edit, view = one(objs, "ClusterRole", "portmapper-edit"), one(objs, "ClusterRole", "portmapper-view")
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k in edit["metadata"]["labels"] if k.startswith(aggregate)} == {aggregate + "admin", aggregate + "edit"}
    assert view["metadata"]["labels"][aggregate + "view"] == "true"
    assert edit["rules"] == [
        {
            "apiGroups": ["portmapper.dev"],
            "resources": ["portmappings"],
            "verbs": ["create", "delete", "deletecollection", "patch", "update"],
        }
    ]
    assert view["rules"][0]["verbs"] == ["get", "list", "watch"]
    bound = {o["roleRef"]["name"] for o in objs if o["kind"].endswith("Binding")}
    assert not bound & {"portmapper-edit", "portmapper-view"}, bound
    deploy = one(objs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "portmapper"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(objs)
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532, sc
    assert sc["readOnlyRootFilesystem"] is True, sc
    assert sc["allowPrivilegeEscalation"] is False, sc
    assert sc["capabilities"] == {"drop": ["ALL"]}, sc
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, sc
    assert c["args"] == ["run"]
    assert c["image"] == "ghcr.io/portmapper/portmapper:0.1.0", c["image"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    e = env(objs)
    assert e["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}, e
    assert e["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, e
    assert e == {
        "POD_NAME": e["POD_NAME"],
        "POD_NAMESPACE": e["POD_NAMESPACE"],
        "PORTMAPPER_HTTP_ADDR": "0.0.0.0:8080",
        "PORTMAPPER_LEADER_ELECT": "true",
        "PORTMAPPER_LEASE_NAME": "portmapper",
        "PORTMAPPER_LEASE_DURATION_SECONDS": "15",
        "PORTMAPPER_LEASE_GRACE_SECONDS": "5",
        "PORTMAPPER_CONCURRENCY": "4",
        "PORTMAPPER_PROBE_CONCURRENCY": "64",
        "PORTMAPPER_MAX_PROBE_TARGETS_PER_PORTMAPPING": "4096",
        "PORTMAPPER_MAX_PROBE_TARGETS_PER_NAMESPACE": "16384",
        "PORTMAPPER_MAX_SLICES_PER_PORTMAPPING": "2000",
        "PORTMAPPER_RESYNC_SECONDS": "300",
        "PORTMAPPER_BATCH_WINDOW_MS": "500",
        "PORTMAPPER_NODE_LOOKUPS": "true",
        "PORTMAPPER_MAX_POD_WATCHES_PER_NAMESPACE": "16",
        "PORTMAPPER_METRICS_MAX_PORT_SERIES": "16",
        # Webhooks may call Services of the PortMapping's own namespace only.
        "PORTMAPPER_WEBHOOK_ALLOWED_HOSTS": "*.{namespace}.svc,*.{namespace}.svc.cluster.local",
        "PORTMAPPER_LOG_LEVEL": "info,kube=warn",
        "PORTMAPPER_LOG_FORMAT": "json",
    }, e
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert one(objs, "Service")["spec"]["selector"] == selector
    assert all(deploy["spec"]["template"]["metadata"]["labels"][k] == v for k, v in selector.items())
    lease_role = one(objs, "Role", "portmapper-leader-election")
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["portmapper"],
            "verbs": ["get", "list", "watch", "update"],
        },
    ], lease_role["rules"]
    for binding in [o for o in objs if o["kind"].endswith("Binding")]:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "portmapper", "namespace": NAMESPACE}
        ], binding
    text = notes()
    assert "leader election on" in text and "all namespaces (ClusterRole)" in text, text


def check_crds_identical() -> None:
    ours = sorted(p.name for p in (CHART / "crds").iterdir())
    theirs = sorted(p.name for p in (ROOT / "crds").iterdir())
    assert ours == theirs, f"charts/portmapper/crds {ours} != crds/ {theirs}; run `make crds`"
    for name in ours:
        a = (CHART / "crds" / name).read_bytes()
        b = (ROOT / "crds" / name).read_bytes()
        assert a == b, f"charts/portmapper/crds/{name} differs from crds/{name}; run `make crds`"
    with helm.Chart.load(CHART) as chart:
        loaded = [c["name"] for c in chart.crds]
    assert loaded == [f"crds/{n}" for n in ours], f"Helm loads CRDs {loaded}"


def check_values_documented() -> None:
    with helm.Chart.load(CHART) as chart:
        defaults = chart.values
    doc = (ROOT / "docs" / "install.md").read_text()
    missing = [p for p in leaf_paths(defaults) if f"`{p}`" not in doc]
    assert not missing, f"values not documented in docs/install.md: {missing}"


# ---------------------------------------------------------------------------------------------
# Every documented option: values → what must change in the manifests.

Case = tuple[str, Obj, Callable[[list[Obj]], None]]


def _watch_namespace(objs: list[Obj]) -> None:
    role = one(objs, "Role", "portmapper")
    assert role["metadata"]["namespace"] == "team-a", role["metadata"]
    binding = one(objs, "RoleBinding", "portmapper")
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    cluster_roles = [o["metadata"]["name"] for o in objs if o["kind"] == "ClusterRole"]
    assert cluster_roles == ["portmapper-nodes", "portmapper-edit", "portmapper-view"], cluster_roles
    assert ("Role", "team-a", "discovery.k8s.io", "endpointslices", "update") in rules(objs)
    # The gate's pod writes stay in the watched namespace too.
    assert [r for r in rules(objs) if r[3] == "pods/status"] == [
        ("Role", "team-a", "", "pods/status", "patch")
    ], rules(objs)
    assert env(objs)["PORTMAPPER_WATCH_NAMESPACE"] == "team-a"
    assert "namespace team-a (Role)" in notes({"watchNamespace": "team-a"})


def _no_nodes(objs: list[Obj]) -> None:
    assert not [r for r in rules(objs) if r[3] == "nodes"], rules(objs)
    assert env(objs)["PORTMAPPER_NODE_LOOKUPS"] == "false"
    cluster_roles = [o["metadata"]["name"] for o in objs if o["kind"] == "ClusterRole"]
    assert cluster_roles == ["portmapper", "portmapper-edit", "portmapper-view"], cluster_roles


def _no_leader(objs: list[Obj]) -> None:
    assert not [r for r in rules(objs) if r[3] == "leases"], rules(objs)
    assert env(objs)["PORTMAPPER_LEADER_ELECT"] == "false"
    assert one(objs, "Deployment")["spec"]["replicas"] == 1
    none_of(objs, "PodDisruptionBudget")  # one replica: a PDB would block every drain


def _lease(objs: list[Obj]) -> None:
    e = env(objs)
    assert e["PORTMAPPER_LEASE_NAME"] == "pm-lock", e
    assert e["PORTMAPPER_LEASE_DURATION_SECONDS"] == "30", e
    assert e["PORTMAPPER_LEASE_GRACE_SECONDS"] == "10", e
    assert one(objs, "Role", "portmapper-leader-election")["rules"][1]["resourceNames"] == ["pm-lock"]


def _tuning(objs: list[Obj]) -> None:
    e = env(objs)
    assert (e["PORTMAPPER_CONCURRENCY"], e["PORTMAPPER_PROBE_CONCURRENCY"]) == ("16", "512"), e
    assert e["PORTMAPPER_PROBE_CONCURRENCY_PER_NAMESPACE"] == "200", e
    assert e["PORTMAPPER_PROBE_CONCURRENCY_PER_PORTMAPPING"] == "50", e
    assert e["PORTMAPPER_RESYNC_SECONDS"] == "60", e
    assert e["PORTMAPPER_BATCH_WINDOW_MS"] == "0", e
    assert e["PORTMAPPER_MAX_POD_WATCHES_PER_NAMESPACE"] == "4", e
    budgets = ("PORTMAPPER_MAX_PROBE_TARGETS_PER_PORTMAPPING", "PORTMAPPER_MAX_PROBE_TARGETS_PER_NAMESPACE",
               "PORTMAPPER_MAX_SLICES_PER_PORTMAPPING")
    assert tuple(e[k] for k in budgets) == ("100", "400", "50"), e
    assert (e["PORTMAPPER_LOG_LEVEL"], e["PORTMAPPER_LOG_FORMAT"]) == ("debug", "text"), e
    assert e["EXTRA"] == "1", e
    assert one(objs, "Deployment")["spec"]["replicas"] == 3


def _image(objs: list[Obj]) -> None:
    c = container(objs)
    assert c["image"] == "registry.local/pm@sha256:" + "a" * 64, c["image"]
    assert c["imagePullPolicy"] == "Always"
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def _image_tag(objs: list[Obj]) -> None:
    assert container(objs)["image"] == "registry.local/pm:dev", container(objs)["image"]


def _metrics(objs: list[Obj]) -> None:
    svc = one(objs, "Service")
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9000, "targetPort": "metrics", "protocol": "TCP"}
    ], svc
    assert svc["spec"]["type"] == "NodePort"
    assert svc["metadata"]["annotations"] == {"a": "b"}
    assert container(objs)["ports"][0]["containerPort"] == 9090
    assert env(objs)["PORTMAPPER_HTTP_ADDR"] == "0.0.0.0:9090"
    assert env(objs)["PORTMAPPER_METRICS_MAX_PORT_SERIES"] == "0"
    sm = one(objs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "5s"}
    ], sm
    labels = svc["metadata"]["labels"]
    assert all(labels[k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())


def _no_metrics_service(objs: list[Obj]) -> None:
    none_of(objs, "Service")
    none_of(objs, "ServiceMonitor")  # nothing to monitor without the Service


def _network_policy(objs: list[Obj]) -> None:
    np = one(objs, "NetworkPolicy")
    spec = np["spec"]
    assert spec["podSelector"]["matchLabels"] == one(objs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [
        {
            "ports": [{"port": "metrics", "protocol": "TCP"}],
            "from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        }
    ], spec["ingress"]
    assert spec["egress"][0] == {
        "ports": [{"port": 6443, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
    }, spec["egress"]
    assert spec["egress"][1]["ports"][0] == {"port": 53, "protocol": "UDP"}
    # DNS goes to the cluster DNS pods only, not port 53 of any address.
    assert spec["egress"][1]["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ], spec["egress"]
    assert spec["egress"][2] == {"to": [{"ipBlock": {"cidr": "10.244.0.0/16"}}]}, spec["egress"]
    assert len(spec["egress"]) == 3, spec["egress"]


def _network_policy_no_dns(objs: list[Obj]) -> None:
    egress = one(objs, "NetworkPolicy")["spec"]["egress"]
    assert egress == [
        {
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
            "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
        }
    ], egress


def _network_policy_node_local_dns(objs: list[Obj]) -> None:
    egress = one(objs, "NetworkPolicy")["spec"]["egress"]
    assert egress[1]["to"] == [{"ipBlock": {"cidr": "169.254.20.10/32"}}], egress


def _webhook_egress(objs: list[Obj]) -> None:
    e = env(objs)
    assert e["PORTMAPPER_WEBHOOK_ALLOWED_HOSTS"] == "*.svc,decider.platform.svc", e
    assert e["PORTMAPPER_WEBHOOK_ALLOWED_CIDRS"] == "10.96.0.0/12,fd00:10:96::/108", e


def _webhooks_off(objs: list[Obj]) -> None:
    e = env(objs)
    # An empty host list, which the operator reads as "refuse every name"; no CIDRs (the
    # flag's default: no IP literal).
    assert e["PORTMAPPER_WEBHOOK_ALLOWED_HOSTS"] == "", e
    assert "PORTMAPPER_WEBHOOK_ALLOWED_CIDRS" not in e, e


def _publication_gate(objs: list[Obj]) -> None:
    policy = one(objs, "MutatingAdmissionPolicy", "portmapper-publication-gate")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Ignore", spec
    assert spec["matchConstraints"]["namespaceSelector"] == {"matchLabels": {"example.com/gated": "enabled"}}
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    pools = spec["matchConditions"][0]["expression"]
    assert pools.startswith('["example.com/pool","app.kubernetes.io/name"].exists(k,'), pools
    mutation = spec["mutations"][0]["jsonPatch"]["expression"]
    assert mutation.count('conditionType: "example.com/published"') == 2, mutation
    binding = one(objs, "MutatingAdmissionPolicyBinding", "portmapper-publication-gate")
    assert binding["spec"] == {"policyName": "portmapper-publication-gate"}


def _dashboard(objs: list[Obj]) -> None:
    cm = one(objs, "ConfigMap", "portmapper-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1", cm["metadata"]
    assert cm["metadata"]["labels"]["team"] == "net", cm["metadata"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Kubernetes"}, cm["metadata"]
    dashboard = json.loads(cm["data"]["portmapper.json"])
    assert dashboard["uid"] == "portmapper"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert any("portmapper_syncs_total" in e for e in exprs), exprs


def _no_pdb(objs: list[Obj]) -> None:
    none_of(objs, "PodDisruptionBudget")


def _pdb_percent(objs: list[Obj]) -> None:
    assert one(objs, "PodDisruptionBudget")["spec"]["minAvailable"] == "50%"


def _existing_sa(objs: list[Obj]) -> None:
    none_of(objs, "ServiceAccount")
    assert one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "ops-sa"
    for b in [o for o in objs if o["kind"].endswith("Binding")]:
        assert b["subjects"][0]["name"] == "ops-sa", b


def _sa_annotations(objs: list[Obj]) -> None:
    sa = one(objs, "ServiceAccount", "custom-sa")
    assert sa["metadata"]["annotations"] == {"iam": "role"}


def _no_rbac(objs: list[Obj]) -> None:
    for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
        none_of(objs, kind)


def _no_user_roles(objs: list[Obj]) -> None:
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "ClusterRole"]
    assert not [n for n in names if n.endswith(("-edit", "-view"))], names


def _names(objs: list[Obj]) -> None:
    assert one(objs, "Deployment")["metadata"]["name"] == "pm"
    assert one(objs, "Deployment")["metadata"]["labels"]["app.kubernetes.io/name"] == "pmapper"


def _name_override(objs: list[Obj]) -> None:
    assert one(objs, "Deployment")["metadata"]["name"] == "portmapper-pmapper"


def _scheduling(objs: list[Obj]) -> None:
    pod_meta = one(objs, "Deployment")["spec"]["template"]["metadata"]
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert pod_meta["annotations"] == {"x": "y"}
    assert pod_meta["labels"]["team"] == "net"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert pod["affinity"] == {"podAntiAffinity": {}}
    assert pod["topologySpreadConstraints"][0]["maxSkew"] == 1
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["terminationGracePeriodSeconds"] == 60
    c = container(objs)
    assert c["resources"] == RESOURCES, c["resources"]
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "metrics"}, **LIVENESS}
    assert c["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "metrics"}, **READINESS}
    assert c["securityContext"] == SECURITY_CONTEXT, c["securityContext"]
    assert pod["securityContext"] == POD_SECURITY_CONTEXT, pod["securityContext"]


RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
LIVENESS = {"initialDelaySeconds": 1, "periodSeconds": 20, "timeoutSeconds": 3, "failureThreshold": 4}
READINESS = {"initialDelaySeconds": 0, "periodSeconds": 7, "timeoutSeconds": 4, "failureThreshold": 6}
SECURITY_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "Localhost", "localhostProfile": "pm.json"},
}
POD_SECURITY_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "fsGroup": 10001,
    "seccompProfile": {"type": "Localhost", "localhostProfile": "pm.json"},
}


CASES: list[Case] = [
    ("watchNamespace → Role/RoleBinding in that namespace", {"watchNamespace": "team-a"}, _watch_namespace),
    ("nodeLookups=false drops the Node RBAC", {"nodeLookups": False}, _no_nodes),
    (
        "leader election off, one replica: no Lease RBAC, no PDB",
        {"leaderElection": {"enabled": False}, "replicaCount": 1},
        _no_leader,
    ),
    (
        "leader election timings and Lease name",
        {"leaderElection": {"leaseName": "pm-lock", "leaseDurationSeconds": 30, "leaseGraceSeconds": 10}},
        _lease,
    ),
    (
        "concurrency, probe concurrency and its fair shares, resync, batch window, pod watches, logs, extra env, replicas",
        {
            "concurrency": 16,
            "probeConcurrency": 512,
            "probeConcurrencyPerNamespace": 200,
            "probeConcurrencyPerPortMapping": 50,
            "resyncSeconds": 60,
            "batchWindowMs": 0,
            "maxPodWatchesPerNamespace": 4,
            "budgets": {"probeTargetsPerPortMapping": 100, "probeTargetsPerNamespace": 400, "slicesPerPortMapping": 50},
            "log": {"level": "debug", "format": "text"},
            "extraEnv": [{"name": "EXTRA", "value": "1"}],
            "replicaCount": 3,
        },
        _tuning,
    ),
    (
        "image by digest, pull policy and secrets",
        {
            "image": {"repository": "registry.local/pm", "digest": "sha256:" + "a" * 64, "pullPolicy": "Always"},
            "imagePullSecrets": [{"name": "regcred"}],
        },
        _image,
    ),
    ("image tag", {"image": {"repository": "registry.local/pm", "tag": "dev"}}, _image_tag),
    (
        "metrics port, Service and ServiceMonitor",
        {
            "metrics": {
                "port": 9090,
                "maxPortSeries": 0,
                "service": {"port": 9000, "type": "NodePort", "annotations": {"a": "b"}},
                "serviceMonitor": {
                    "enabled": True,
                    "interval": "15s",
                    "scrapeTimeout": "5s",
                    "labels": {"release": "kube-prometheus-stack"},
                },
            }
        },
        _metrics,
    ),
    (
        "no metrics Service (and so no ServiceMonitor)",
        {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
        _no_metrics_service,
    ),
    (
        "NetworkPolicy with scrape peers, API server CIDR, probe egress",
        {
            "networkPolicy": {
                "enabled": True,
                "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
                "apiServerPorts": [6443],
                "apiServerCIDRs": ["10.0.0.1/32"],
                "extraEgress": [{"to": [{"ipBlock": {"cidr": "10.244.0.0/16"}}]}],
            }
        },
        _network_policy,
    ),
    (
        "publication gate injected by a MutatingAdmissionPolicy",
        {
            "publicationGate": {
                "inject": True,
                "namespaceLabel": "example.com/gated",
                "poolKeys": ["example.com/pool", "app.kubernetes.io/name"],
                "conditionType": "example.com/published",
            }
        },
        _publication_gate,
    ),
    (
        "Grafana dashboard ConfigMap",
        {
            "metrics": {
                "dashboard": {
                    "enabled": True,
                    "labels": {"grafana_dashboard": "1", "team": "net"},
                    "annotations": {"grafana_folder": "Kubernetes"},
                }
            }
        },
        _dashboard,
    ),
    (
        "NetworkPolicy without DNS",
        {"networkPolicy": {"enabled": True, "dns": False, "apiServerCIDRs": ["10.0.0.1/32"]}},
        _network_policy_no_dns,
    ),
    (
        "NetworkPolicy with NodeLocal DNSCache",
        {
            "networkPolicy": {
                "enabled": True,
                "apiServerCIDRs": ["10.0.0.1/32"],
                "dnsTo": [{"ipBlock": {"cidr": "169.254.20.10/32"}}],
            }
        },
        _network_policy_node_local_dns,
    ),
    (
        "webhook egress: every Service, a shared decider, Service CIDRs",
        {
            "webhookEgress": {
                "allowedHosts": ["*.svc", "decider.platform.svc"],
                "allowedCIDRs": ["10.96.0.0/12", "fd00:10:96::/108"],
            }
        },
        _webhook_egress,
    ),
    ("webhooks off", {"webhookEgress": {"allowedHosts": [], "allowedCIDRs": []}}, _webhooks_off),
    ("PodDisruptionBudget off", {"podDisruptionBudget": {"enabled": False}}, _no_pdb),
    ("PodDisruptionBudget as a percentage", {"podDisruptionBudget": {"minAvailable": "50%"}}, _pdb_percent),
    ("existing ServiceAccount", {"serviceAccount": {"create": False, "name": "ops-sa"}}, _existing_sa),
    (
        "ServiceAccount name and annotations",
        {"serviceAccount": {"name": "custom-sa", "annotations": {"iam": "role"}}},
        _sa_annotations,
    ),
    ("rbac.create=false", {"rbac": {"create": False}}, _no_rbac),
    ("no aggregation to the user roles", {"rbac": {"aggregateToUserRoles": False}}, _no_user_roles),
    ("fullnameOverride and nameOverride", {"fullnameOverride": "pm", "nameOverride": "pmapper"}, _names),
    ("nameOverride alone", {"nameOverride": "pmapper"}, _name_override),
    (
        "scheduling, probes, resources, security context user",
        {
            "podAnnotations": {"x": "y"},
            "podLabels": {"team": "net"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "affinity": {"podAntiAffinity": {}},
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
            "priorityClassName": "system-cluster-critical",
            "terminationGracePeriodSeconds": 60,
            "resources": RESOURCES,
            "livenessProbe": LIVENESS,
            "readinessProbe": READINESS,
            "securityContext": SECURITY_CONTEXT,
            "podSecurityContext": POD_SECURITY_CONTEXT,
        },
        _scheduling,
    ),
]

# Keys not meaningfully set by a case above, with the reason.
UNCASED: dict[str, str] = {}


def check_cases_cover_every_value() -> None:
    with helm.Chart.load(CHART) as chart:
        defaults = chart.values
    covered: set[str] = set()
    for _, values, _ in CASES:
        covered.update(leaf_paths(values))
    # A case setting a map or list covers the leaves below it.
    missing = [
        p
        for p in leaf_paths(defaults)
        if p not in UNCASED and not any(p == c or p.startswith(c + ".") or c.startswith(p + ".") for c in covered)
    ]
    assert not missing, f"values.yaml keys no test case sets: {missing}"


# ---------------------------------------------------------------------------------------------
# Invalid values: rejected before anything reaches a cluster.

INVALID: list[tuple[Obj, str]] = [
    ({"concurrency": 0}, "/concurrency"),
    ({"concurrency": 65}, "/concurrency"),
    ({"probeConcurrency": 5000}, "/probeConcurrency"),
    ({"probeConcurrencyPerNamespace": -1}, "/probeConcurrencyPerNamespace"),
    ({"probeConcurrencyPerPortMapping": 5000}, "/probeConcurrencyPerPortMapping"),
    ({"resyncSeconds": 0}, "/resyncSeconds"),
    ({"budgets": {"probeTargetsPerPortMapping": 0}}, "/budgets/probeTargetsPerPortMapping"),
    ({"budgets": {"slicesPerPortMapping": "many"}}, "/budgets/slicesPerPortMapping"),
    ({"batchWindowMs": 10001}, "/batchWindowMs"),
    ({"maxPodWatchesPerNamespace": 0}, "/maxPodWatchesPerNamespace"),
    ({"metrics": {"maxPortSeries": 4097}}, "/metrics/maxPortSeries"),
    ({"replicaCount": 0}, "/replicaCount"),
    ({"leaderElection": {"leaseDurationSeconds": 1}}, "/leaderElection/leaseDurationSeconds"),
    ({"leaderElection": {"leaseGraceSeconds": 15}}, "leaseGraceSeconds must be smaller"),
    ({"leaderElection": {"enabled": False}}, "replicaCount > 1 requires leaderElection.enabled"),
    ({"leaderElection": {"leaseName": "Not_A_Name"}}, "/leaderElection/leaseName"),
    ({"watchNamespace": "Team_A"}, "/watchNamespace"),
    ({"log": {"format": "xml"}}, "/log/format"),
    ({"log": {"level": ""}}, "/log/level"),
    ({"nodeLookups": "yes"}, "/nodeLookups"),
    ({"image": {"repository": ""}}, "/image/repository"),
    ({"image": {"digest": "latest"}}, "/image/digest"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"metrics": {"port": 80}}, "/metrics/port"),
    ({"metrics": {"service": {"type": "ExternalName"}}}, "/metrics/service/type"),
    ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "/metrics/serviceMonitor/interval"),
    ({"podDisruptionBudget": {"minAvailable": "half"}}, "/podDisruptionBudget/minAvailable"),
    ({"networkPolicy": {"apiServerCIDRs": ["10.0.0.1"]}}, "/networkPolicy/apiServerCIDRs"),
    ({"networkPolicy": {"apiServerPorts": []}}, "/networkPolicy/apiServerPorts"),
    ({"networkPolicy": {"enabled": True}}, "networkPolicy.enabled needs networkPolicy.apiServerCIDRs"),
    ({"webhookEgress": {"allowedHosts": ["https://decider.shop.svc"]}}, "/webhookEgress/allowedHosts/0"),
    ({"webhookEgress": {"allowedHosts": ["a.*.svc"]}}, "/webhookEgress/allowedHosts/0"),
    ({"webhookEgress": {"allowedCIDRs": ["10.96.0.10"]}}, "/webhookEgress/allowedCIDRs/0"),
    ({"webhookEgress": {"allowHosts": ["*"]}}, "additional properties 'allowHosts' not allowed"),
    ({"securityContext": {"readOnlyRootFilesystem": False}}, "/securityContext/readOnlyRootFilesystem"),
    ({"securityContext": {"allowPrivilegeEscalation": True}}, "/securityContext/allowPrivilegeEscalation"),
    ({"securityContext": {"runAsUser": 0}}, "/securityContext/runAsUser"),
    ({"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}, "/securityContext/capabilities/drop"),
    ({"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}, "/securityContext/capabilities/add"),
    ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "/securityContext/seccompProfile/type"),
    ({"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}}, "/podSecurityContext/seccompProfile/type"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
    ({"publicationGate": {"inject": True}}, "publicationGate.inject needs publicationGate.poolKeys"),
    ({"publicationGate": {"poolKeys": ["Not A Key"]}}, "/publicationGate/poolKeys/0"),
    ({"publicationGate": {"conditionType": "Ready"}}, "/publicationGate/conditionType"),
    ({"metrics": {"dashboard": {"labels": {"grafana_dashboard": 1}}}}, "/metrics/dashboard/labels/grafana_dashboard"),
    ({"replicas": 2}, "additional properties 'replicas' not allowed"),
    ({"leaderElection": {"leaseDuration": 15}}, "additional properties 'leaseDuration' not allowed"),
]


def check_invalid(values: Obj, expected: str) -> None:
    try:
        render(values)
    except (helm.HelmValuesError, helm.HelmRenderError) as err:
        assert expected in str(err), f"rejected, but the message does not name {expected!r}: {err}"
        return
    raise AssertionError(f"accepted invalid values {values}")


# ---------------------------------------------------------------------------------------------
# The Argo CD health check documented in docs/install.md, run in Lua 5.1 (Argo CD's gopher-lua
# dialect) on PortMappings as the operator writes them.

ARGO_KEY = "resource.customizations.health.portmapper.dev_PortMapping: |"


def argo_health_script() -> str:
    doc = (ROOT / "docs" / "install.md").read_text().splitlines()
    start = next(i for i, line in enumerate(doc) if line.strip() == ARGO_KEY)
    indent = len(doc[start]) - len(doc[start].lstrip()) + 2
    body = []
    for line in doc[start + 1 :]:
        if line.strip() == "```":
            break
        body.append(line[indent:])
    return "\n".join(body)


def argo_health(obj: Obj) -> tuple[str, str]:
    import lupa.lua51 as lua51  # only this check needs Lua

    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    check = lua.eval(f"function(obj)\n{argo_health_script()}\nend")
    hs = check(lua.table_from(obj, recursive=True))
    return hs["status"], hs["message"]


def _pm(generation: int, observed: int | None, *conditions: tuple[str, str, str]) -> Obj:
    obj: Obj = {"metadata": {"name": "web", "generation": generation}}
    if observed is not None:
        obj["status"] = {
            "observedGeneration": observed,
            "summary": "http 3/4",
            "conditions": [
                {"type": t, "status": st, "reason": reason, "message": f"{reason} message"}
                for t, st, reason in conditions
            ],
        }
    return obj


ARGO_CASES: list[tuple[str, Obj, str, str]] = [
    ("no status yet", _pm(1, None), "Progressing", "waiting for the operator"),
    (
        "Ready=True",
        _pm(2, 2, ("Ready", "True", "Published"), ("Stalled", "False", "Published")),
        "Healthy",
        "http 3/4",
    ),
    (
        "Stalled=True",
        _pm(1, 1, ("Ready", "False", "ServiceNotFound"), ("Stalled", "True", "ServiceNotFound")),
        "Degraded",
        "ServiceNotFound: ServiceNotFound message",
    ),
    (
        "Ready=False while retrying",
        _pm(1, 1, ("Ready", "False", "ApplyFailed"), ("Reconciling", "True", "ApplyFailed")),
        "Progressing",
        "ApplyFailed: ApplyFailed message",
    ),
    (
        "status of an older generation",
        _pm(3, 2, ("Ready", "True", "Published")),
        "Progressing",
        "the operator has not observed the latest spec yet",
    ),
]


def check_argo(obj: Obj, status: str, message: str) -> None:
    got = argo_health(obj)
    assert got == (status, message), f"got {got}, want {(status, message)}"


# ---------------------------------------------------------------------------------------------


def run_checks() -> int:
    results: list[tuple[str, str | None]] = []

    def test(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            results.append((name, None))
            print(f"ok    {name}")
        except Exception as err:  # noqa: BLE001 - every failure is reported, then counted
            detail = "".join(traceback.format_exception_only(type(err), err)).strip()
            results.append((name, detail))
            print(f"FAIL  {name}\n      {detail}")

    print(f"helm SDK {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__})")
    test("crds/ and charts/portmapper/crds/ are identical", check_crds_identical)
    test("default values render the expected objects", check_defaults)
    test("default values lint clean (strict)", lambda: _no_findings(None))
    test("every values.yaml key is documented in docs/install.md", check_values_documented)
    test("every values.yaml key is set by a test case", check_cases_cover_every_value)
    for name, values, assertion in CASES:
        test(f"option: {name}", lambda v=values, a=assertion: a(render(copy.deepcopy(v))))
        test(f"option lints clean: {name}", lambda v=values: _no_findings(copy.deepcopy(v)))
    for values, expected in INVALID:
        test(f"rejects {json.dumps(values)}", lambda v=values, e=expected: check_invalid(v, e))
    for name, obj, status, message in ARGO_CASES:
        test(f"Argo CD health (docs/install.md): {name} → {status}", lambda o=obj, st=status, m=message: check_argo(o, st, m))

    failed = [r for r in results if r[1] is not None]
    status = "PASS" if not failed else "FAIL"
    print(f"chart tests: {status}: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


def _no_findings(values: Obj | None) -> None:
    found = lint_findings(values)
    assert not found, found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="run every chart test")
    r = sub.add_parser("render", help="print the rendered objects as a JSON array")
    r.add_argument("--namespace", default=NAMESPACE)
    r.add_argument("--name", default=RELEASE)
    r.add_argument("--values", default="{}", help="values as a JSON object")
    args = parser.parse_args()
    if args.command == "check":
        return run_checks()
    json.dump(render(json.loads(args.values), args.namespace, args.name), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
