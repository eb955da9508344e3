"""k8s.install.operators: `up`'s install plan held against the real upstream files
(``../shared/k8s-upstream``).

For every provider x serving mode, without and with Argo Workflows, the installer runs
against a cluster made of those files (tests/support/upstream.py): each ``kubectl apply`` reads the
file its URL names, each patch changes what was applied, each wait is recorded. Then, from
the files:
- every label selector selects something, every applied URL is one INDEX.json lists;
- every namespaced object lands in a namespace that exists before it;
- every Deployment and namespace a wait names was applied before the wait, and each
  waited Deployment's selector matches its own pod template's labels;
- every ConfigMap, Service, port and Deployment `up` patches exists;
- every admission webhook (failurePolicy Fail) that can match an object the plan or the
  later tasks create is served by a Deployment the plan waited for before that object.
The pods' requests against the same runs: test_capacity.py (the ``plan`` fixture is in
conftest.py).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from invoke import Config, MockContext, Result

from k8s.install import operators, optional_operators, versions
from k8s.install.operators import Installer
from k8s.install.preflight import Preflight
from k8s.providers import provider as make_provider
from runtime.cluster import ClusterRuntime
from runtime.requests import UpRequest
from runtime.workdir import Workdir
from tests.support.fakekube import FakeClock
from tests.support.install_plan import ARGO_PLANS, settings
from tests.support.upstream import (
    PlanCluster,
    Step,
    baseline,
    index,
    objects,
    plan_context,
    selector_matches,
)


# ------------------------------------------------------------------ URLs and selectors
def test_every_applied_url_is_an_indexed_upstream_file(plan: PlanCluster):
    applied = [step.url for step in plan.steps if step.what == "apply"]
    assert applied, "the plan applied nothing"
    assert all(url in index() for url in applied)


def test_every_label_selector_selects_at_least_one_object(plan: PlanCluster):
    for step in plan.steps:
        if step.what == "apply" and step.selector:
            assert step.objects, f"`{step.command}` selects nothing in {step.url}"


def test_a_selector_that_selects_nothing_fails_up_at_once(monkeypatch):
    """Finding 1: the old two-pass Istio install selected nothing; kubectl says so and
    exits 1, and that is permanent, not retried for 10 minutes."""
    cluster = PlanCluster("kind", baseline("kind"))
    monkeypatch.setattr(operators, "wait_deployments_available", cluster.wait)
    release_istio = next(u for u in index() if u.endswith("/knative-v1.21.1/istio.yaml"))
    inst = Installer(
        plan_context(cluster),
        cluster.kube,
        make_provider("kind"),
        settings("kind", "knative"),
        lambda _: None,
        FakeClock(),
    )
    with pytest.raises(operators.PermanentError, match="no objects passed to apply"):
        inst.kubectl_retrying(f"apply -l knative.dev/crd-install=true -f {release_istio}", "x")


def test_client_side_applies_fit_the_last_applied_annotation(plan: PlanCluster):
    """Client-side apply stores each object in an annotation (256 KiB at most: the training
    operator's CRDs need --server-side for that reason); every other apply must fit."""
    for step in plan.steps:
        if step.what == "apply" and "--server-side" not in step.command:
            for obj in step.objects:
                size = len(json.dumps(obj))
                assert size < 256 * 1024, f"{obj['metadata']['name']} ({size} B) in {step.url}"


@pytest.mark.parametrize("provider,mode,argo", ARGO_PLANS)
def test_invoke_dry_up_applies_no_url_outside_the_index(provider, mode, argo, tmp_path):
    c = MockContext(
        config=Config(overrides={"run": {"dry": True}}), run={re.compile(".*"): Result("")}
    )
    rt = ClusterRuntime(
        c,
        provider,
        Workdir.at(tmp_path / "wd"),
        tmp_path,
        out=lambda _: None,
        clock=FakeClock(),
        preflight=lambda *a, **k: Preflight(),
    )
    rt.__dict__["image"] = "distml:0123456789ab"  # no image hash of a tmp dir
    assert rt.up(UpRequest(serving_mode=mode, with_argo=argo)) == 0
    urls = []
    for call in c.run.call_args_list:
        words = call.args[0].split()
        for flag in ("-f", "-k"):
            if "apply" in words and flag in words:
                urls.append(words[words.index(flag) + 1].strip("'"))
    assert urls and all(u in index() for u in urls), sorted(set(urls) - set(index()))
    assert (versions.ARGO_WORKFLOWS_URL in urls) == argo


# ------------------------------------------------------------------ waits and patches
def _applied_before(plan: PlanCluster, at: int) -> list[dict[str, Any]]:
    return [o for step in plan.steps[:at] for o in step.objects]


def test_every_wait_names_what_was_applied_before_it(plan: PlanCluster):
    waits = [(i, s) for i, s in enumerate(plan.steps) if s.what == "wait"]
    assert waits
    for i, step in waits:
        before = _applied_before(plan, i) + baseline(plan.provider)
        deployments = {
            o["metadata"]["name"]
            for o in before
            if o["kind"] == "Deployment" and o["metadata"].get("namespace") == step.namespace
        }
        assert deployments, f"wait on namespace {step.namespace}: no Deployment applied there"
        missing = set(step.names or []) - deployments
        assert not missing, f"wait on {step.namespace}/{sorted(missing)}: never applied"


def test_every_waited_deployment_selects_its_own_pods(plan: PlanCluster):
    """A Deployment whose selector misses its template's labels is refused by the API
    server (and one that matched other pods would never turn Available for the right
    reason): each one a wait names or covers, as applied, selects its own pods."""
    checked = 0
    for step in plan.steps:
        if step.what != "wait":
            continue
        for d in plan.all("Deployment"):
            if d["metadata"]["namespace"] != step.namespace or (
                step.names is not None and d["metadata"]["name"] not in step.names
            ):
                continue
            template = (d["spec"].get("template") or {}).get("metadata") or {}
            checked += 1
            assert selector_matches(d["spec"]["selector"], template.get("labels") or {}), (
                f"Deployment {step.namespace}/{d['metadata']['name']}: its selector "
                f"{d['spec']['selector']} does not match its pods' labels"
            )
    assert checked


def test_every_namespaced_object_lands_in_a_namespace_that_exists(plan: PlanCluster):
    """kubectl applies a file's objects in order: each namespaced one needs its namespace
    from the cluster, an earlier step or earlier in the same file (install.yaml of Argo
    carries none: `up` creates `argo` first)."""
    have = {o["metadata"]["name"] for o in baseline(plan.provider)}
    for step in plan.steps:
        for obj in step.objects:
            if obj["kind"] == "Namespace":
                have.add(obj["metadata"]["name"])
            ns = obj["metadata"].get("namespace")
            assert ns is None or ns in have, (
                f"{obj['kind']} {ns}/{obj['metadata']['name']} ({step.what} "
                f"{step.url or step.command}): namespace {ns} does not exist yet"
            )


def test_argo_is_applied_server_side_into_its_namespace_and_its_deployments_waited_for(
    plan: PlanCluster,
):
    applies = [s for s in plan.steps if s.url == versions.ARGO_WORKFLOWS_URL]
    if not plan.with_argo:
        assert not applies and not plan.find("Namespace", optional_operators.ARGO_NAMESPACE, None)
        return
    (apply,) = applies
    at = plan.steps.index(apply)
    words = shlex.split(apply.command)
    assert (
        "--server-side" in words
        and words[words.index("-n") + 1] == optional_operators.ARGO_NAMESPACE
    )
    # The file holds no Namespace: the one `up` makes came just before it.
    assert not [o for o in apply.objects if o["kind"] == "Namespace"]
    assert plan.steps[at - 1].objects[0]["metadata"]["name"] == optional_operators.ARGO_NAMESPACE
    in_file = {
        o["metadata"]["name"]
        for o in apply.objects
        if o["kind"] == "Deployment"
        and o["metadata"]["namespace"] == optional_operators.ARGO_NAMESPACE
    }
    wait = plan.steps[at + 1]
    assert wait.what == "wait" and wait.namespace == optional_operators.ARGO_NAMESPACE
    # Every Deployment of the release is waited for (a new one in a later release fails here).
    assert set(wait.names or []) == in_file == set(optional_operators.ARGO_DEPLOYMENTS)
    # Its CRDs are what needs --server-side: far above the 256 KiB annotation.
    crds = [o for o in apply.objects if o["kind"] == "CustomResourceDefinition"]
    assert max(len(json.dumps(o)) for o in crds) > 256 * 1024
    assert "workflows.argoproj.io" in {o["metadata"]["name"] for o in crds}


def test_every_patch_targets_an_applied_object_and_field(plan: PlanCluster):
    patches = [s for s in plan.steps if s.what == "patch"]
    for step in patches:
        target = step.target  # as applied, before this patch
        assert target, f"`{step.command}`: its target was never applied"
        if target["kind"] == "Service":  # the ports it re-exposes must be the Service's
            body = json.loads(shlex.split(step.command)[-1])
            have = {p["port"] for p in target["spec"]["ports"]}
            want = {p["port"] for p in body["spec"]["ports"]}
            assert want <= have, f"{step.command}: the Service has ports {sorted(have)}"
        if target["kind"] == "ConfigMap":  # Knative reads it; up merges keys into it
            assert target["metadata"]["labels"]["app.kubernetes.io/name"] == "knative-serving"
    if plan.provider == "kind" and any(s.url == versions.METRICS_SERVER_URL for s in plan.steps):
        server = plan.find("Deployment", "metrics-server", "kube-system")
        args = server["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args.count("--kubelet-insecure-tls") == 1
    if any(s.url == versions.ISTIO_URL for s in plan.steps):
        istiod = plan.find("Deployment", "istiod", "istio-system")
        containers = istiod["spec"]["template"]["spec"]["containers"]
        assert [c["name"] for c in containers] == [operators.ISTIOD_CONTAINER]
        assert containers[0]["resources"]["requests"] == versions.ISTIOD_REQUESTS
        hpa = plan.find("HorizontalPodAutoscaler", "istiod", "istio-system")
        assert hpa["spec"]["maxReplicas"] == 1 and hpa["spec"]["minReplicas"] == 1


def test_knative_configmap_keys_are_the_ones_knative_reads():
    """config-domain's key is the domain itself; config-deployment's key is documented in
    the ConfigMap's own _example block."""
    core = objects(versions.KNATIVE_SERVING_CORE_URL)
    cm = {o["metadata"]["name"]: o for o in core if o["kind"] == "ConfigMap"}
    assert "registries-skipping-tag-resolving" in cm["config-deployment"]["data"]["_example"]
    assert "example.com" in cm["config-domain"]["data"]["_example"]


# ------------------------------------------------------------------ webhooks
def _plural(obj: dict[str, Any], crds: dict[tuple[str, str], str]) -> tuple[str, str, str]:
    group, _, version = obj["apiVersion"].rpartition("/")
    irregular = {"Ingress": "ingresses", "NetworkPolicy": "networkpolicies"}
    kind = obj["kind"]
    return group, version, crds.get((group, kind)) or irregular.get(kind, kind.lower() + "s")


def _rule_matches(rule: dict[str, Any], op: str, gvr: tuple[str, str, str]) -> bool:
    group, version, plural = gvr
    return (
        bool({op, "*"} & set(rule.get("operations") or []))
        and bool({group, "*"} & set(rule.get("apiGroups") or []))
        and bool({version, "*"} & set(rule.get("apiVersions") or ["*"]))
        and bool({plural, "*", "*/*"} & set(rule.get("resources") or []))
    )


def _webhooks(step: Step) -> list[tuple[int, dict[str, Any], bool]]:
    """(position in the step, webhook, rules filled at runtime) for each webhook."""
    out = []
    for k, obj in enumerate(step.objects):
        if obj.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj.get("webhooks") or []:
                out.append((k, hook, not hook.get("rules")))
    return out


def _hook_matches(plan, hook, runtime_rules, obj, op, crds) -> bool:
    if hook.get("failurePolicy", "Fail") != "Fail":
        return False
    if runtime_rules:  # Knative fills in the rules when its webhook starts: all of its kinds
        ns_ok = "webhooks.knative.dev/exclude" not in _namespace_labels(plan, obj)
    else:
        gvr = _plural(obj, crds)
        if not any(_rule_matches(r, op, gvr) for r in hook["rules"]):
            return False
        ns_ok = True
    if obj["metadata"].get("namespace") or obj["kind"] == "Namespace":
        ns_ok = ns_ok and selector_matches(
            hook.get("namespaceSelector"), _namespace_labels(plan, obj)
        )
    labels = obj["metadata"].get("labels") or {}
    return ns_ok and selector_matches(hook.get("objectSelector"), labels)


def _namespace_labels(plan: PlanCluster, obj: dict[str, Any]) -> dict[str, str]:
    if obj["kind"] == "Namespace":
        return obj["metadata"].get("labels") or {}
    ns = plan.find("Namespace", obj["metadata"].get("namespace") or "", None) or {}
    return (ns.get("metadata") or {}).get("labels") or {}


def _serving_deployments(plan: PlanCluster, hook: dict[str, Any]) -> list[tuple[str, str]]:
    ref = hook["clientConfig"]["service"]
    svc = plan.find("Service", ref["name"], ref["namespace"])
    assert svc, f"webhook {hook['name']}: its Service {ref} is never applied"
    want = svc["spec"]["selector"]
    return [
        (ref["namespace"], d["metadata"]["name"])
        for d in plan.all("Deployment")
        if d["metadata"]["namespace"] == ref["namespace"]
        and want.items() <= (d["spec"]["template"]["metadata"].get("labels") or {}).items()
    ]


def _waited(plan: PlanCluster, before: int) -> set[tuple[str, str]]:
    done = set()
    for step in plan.steps[:before]:
        if step.what == "wait":
            for d in plan.all("Deployment"):
                ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
                if ns == step.namespace and (step.names is None or name in step.names):
                    done.add((ns, name))
    return done


def test_every_webhook_that_can_admit_a_created_object_was_waited_for(plan: PlanCluster):
    crds = {
        (o["spec"]["group"], o["spec"]["names"]["kind"]): o["spec"]["names"]["plural"]
        for o in plan.all("CustomResourceDefinition")
    }
    # A webhook meets the objects after it in its own file (kubectl applies in order) and
    # everything later; one whose rules Knative fills in at runtime, only later steps.
    hooks: list[tuple[int, int, dict[str, Any], bool]] = []
    problems, checked = [], 0
    for j, step in enumerate(plan.steps):
        hooks += [(j, k, h, rt) for k, h, rt in _webhooks(step)]
        op = "UPDATE" if step.what == "patch" else "CREATE"
        for n, obj in enumerate(step.objects):
            for i, k, hook, runtime_rules in hooks:
                if i == j and (runtime_rules or n <= k):
                    continue
                if not _hook_matches(plan, hook, runtime_rules, obj, op, crds):
                    continue
                checked += 1
                serving = _serving_deployments(plan, hook)
                if not serving or not set(serving) <= _waited(plan, j):
                    problems.append(
                        f"{obj['kind']} {obj['metadata']['name']} ({step.what} "
                        f"{step.url or step.command}) meets webhook {hook['name']}, served by "
                        f"{serving or 'no Deployment'}, not waited for before it"
                    )
    assert checked, "no webhook matched anything: the matcher is broken"
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ the docs
DOCS = Path(__file__).resolve().parents[3] / "docs"
CLUSTER_DOC = (DOCS / "cluster.md").read_text()  # the Host header, the resource table
EVERY_DOC = {p.name: p.read_text() for p in (DOCS.parent / "README.md", *DOCS.glob("*.md"))}


def test_the_documented_host_header_is_kserves_domain_template():
    """Finding 7: KServe 0.20 names the host {{ .Name }}-{{ .Namespace }}.{{ .IngressDomain }}."""
    config = next(
        o
        for o in objects(versions.KSERVE_URL)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "inferenceservice-config"
    )
    template = json.loads(config["data"]["ingress"])["domainTemplate"]
    s = settings("k3d", "knative")
    host = (
        template.replace("{{ .Name }}", s.service)
        .replace("{{ .Namespace }}", s.namespace)
        .replace("{{ .IngressDomain }}", operators.KNATIVE_DOMAIN)
    )
    assert host == "tf-mnist-kubeflow.example.com"
    assert f"Host: {host}" in CLUSTER_DOC
    wrong = "tf-mnist.kubeflow.example.com"
    assert [name for name, text in EVERY_DOC.items() if wrong in text] == []
