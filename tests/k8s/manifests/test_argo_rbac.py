"""k8s.manifests.argo_rbac: the Role of the Workflow's steps grants exactly what the
rendered steps do (get and patch only on the objects of those names), and Argo's
controller (its ServiceAccount as its Deployment names it) is granted exactly what the
ingestion step's memoization makes it do to this namespace's cache ConfigMap, which
install.yaml alone does not grant. Both derived from the rendered templates, not
restated. What lives in Argo's namespace is named per distml namespace."""

from __future__ import annotations

from typing import Any

import pytest

from k8s import manifests as m
from k8s.install import versions
from k8s.manifests.names import ARGO_CONTROLLER_SA, ARGO_NAMESPACE
from k8s.providers.settings import EXISTING, SERVING_MODES, Settings
from ml.contract import MODEL_TYPES
from tests.support import k8s_schemas, upstream
from tests.support.workflow_kit import IMAGE, KEY, MATRIX, S, build, embedded

EXISTING_MATRIX = [
    pytest.param(
        Settings(image=IMAGE, provider=EXISTING, namespace="ml-team", serving_mode=mode),
        id=f"existing-{mode}",
    )
    for mode in SERVING_MODES
]

Grant = tuple[str, str, str, str]  # (API group, resource, verb, resource name or "*")

# What `kubectl <action> -f manifest -o json` (argo-workflows v4.1.2
# workflow/executor/resource.go: getKubectlArguments) asks of the API: create POSTs;
# client-side apply GETs, then POSTs (absent) or PATCHes (present); a json patch, `kubectl
# patch --type json --patch-file manifest <resource> <name>` (no -f), GETs the named object
# and then PATCHes it: kubectl's resource builder requires the object by default
# (cli-runtime v0.33.1, Argo v4.0.5's pin: pkg/resource/builder.go requireObject: true,
# Do() -> RetrieveLazy -> Info.Get). A real run refused the step without get.
KUBECTL_VERBS = {
    "create": {"create"},
    "apply": {"get", "create", "patch"},
    "patch": {"get", "patch"},
}
# WaitResource -> checkResourceState polls the object with GET when a condition is set.
CONDITION_VERBS = {"get"}
# Every step pod's executor reports a WorkflowTaskResult
# (manifests/quick-start/base/executor/emissary/executor-role.yaml at v4.1.2).
EXECUTOR = {("argoproj.io", "workflowtaskresults", v) for v in ("create", "patch")}


# Core kinds' resource names (the API server's discovery: GET /api/v1); custom kinds'
# come from their CRDs.
CORE_RESOURCES = {"Service": "services", "ConfigMap": "configmaps"}


def resource_of(obj: dict[str, Any]) -> tuple[str, str]:
    """(API group, plural resource) of an object."""
    group = obj["apiVersion"].rpartition("/")[0]
    if not group:
        return group, CORE_RESOURCES[obj["kind"]]
    crd = k8s_schemas.crd(group, obj["kind"])
    return group, crd["spec"]["names"]["plural"]


def patch_target(flags: list[str]) -> tuple[str, str, str]:
    """(API group, plural resource, name) of `kubectl patch <resource> <name> ...`, the
    resource as `<plural>.<version>.<group>` or a core plural (kubectl's ParseResourceArg)."""
    resource, name = flags[:2]
    plural, _, rest = resource.partition(".")
    return rest.partition(".")[2], plural, name


def needed(wf: dict[str, Any]) -> set[tuple[str, str, str]]:
    """What the steps' pods ask of the API: (group, resource, verb)."""
    return {(g, r, v) for g, r, v, _ in needed_by_name(wf)}


def needed_by_name(wf: dict[str, Any]) -> set[Grant]:
    """What the steps' pods ask of the API, on which object: a create names none ("*",
    RBAC cannot limit it by name); a get or patch names the step's object."""
    out: set[Grant] = set()
    for t in wf["spec"]["templates"]:
        if "container" in t or "resource" in t:  # a step that runs a pod
            out |= {(*e, "*") for e in EXECUTOR}
        if "resource" in t:
            resource = t["resource"]
            verbs = set(KUBECTL_VERBS[resource["action"]])
            if resource.get("successCondition") or resource.get("failureCondition"):
                verbs |= CONDITION_VERBS
            if resource["action"] == "patch":  # the object named by the flags
                group, plural, name = patch_target(resource["flags"])
            else:
                obj = embedded(t)
                (group, plural), name = resource_of(obj), obj["metadata"]["name"]
            out |= {(group, plural, v, "*" if v == "create" else name) for v in verbs}
    return out


# What Argo's controller does to a memoization ConfigMap, in its own namespace (argo-workflows
# v4.1.2 workflow/controller/controller.go:235 gives the cache factory the controller's
# namespace; cache/cache.go:98 opens each ConfigMap cache there), per
# workflow/controller/cache/configmap_cache.go: ``load`` (every cache lookup) GETs it
# (:93) and, on a hit, UPDATEs it to record the hit time (:128); ``save`` (after the step
# succeeds; operator.go:1261-1265 marks the step Error when it fails) GETs it (:164) and
# UPDATEs it (:203). It CREATEs it (:166) only when absent, and `invoke workflow` applies
# it before the Workflow (checked below).
CACHE_VERBS = ("get", "update")


def controller_needs(wf: dict[str, Any]) -> set[Grant]:
    """What the controller does in its own namespace for the Workflow's memoized templates."""
    return {
        ("", "configmaps", verb, t["memoize"]["cache"]["configMap"]["name"])
        for t in wf["spec"]["templates"]
        if "memoize" in t
        for verb in CACHE_VERBS
    }


def _expand(rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (g, r, v, name)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
        for name in rule.get("resourceNames") or ["*"]
    }


def grants(objs: list[dict[str, Any]], sa: str, sa_ns: str, namespace: str) -> set[Grant]:
    """What RBAC objects among ``objs`` grant ServiceAccount ``sa_ns/sa`` in
    ``namespace``: RoleBindings there (to a Role there or a ClusterRole) and
    ClusterRoleBindings."""
    by_ref = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objs
        if o["kind"] in ("Role", "ClusterRole")
    }
    subject = {"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}
    bindings = [
        b
        for b in objs
        if (b["kind"] == "ClusterRoleBinding")
        or (b["kind"] == "RoleBinding" and b["metadata"].get("namespace") == namespace)
    ]
    out: set[Grant] = set()
    for b in bindings:
        if subject not in b.get("subjects", []):
            continue
        ref = b["roleRef"]
        ns = namespace if ref["kind"] == "Role" else None
        role = by_ref.get((ref["kind"], ns, ref["name"]))
        if role is not None:
            out |= _expand(role.get("rules") or [])
    return out


def covers(granted: set[Grant], need: Grant) -> bool:
    group, resource, verb, _ = need
    return need in granted or (group, resource, verb, "*") in granted


# -- the steps' ServiceAccount ----------------------------------------------------------


@pytest.mark.parametrize("s", [*MATRIX, *EXISTING_MATRIX])
def test_the_role_grants_exactly_what_the_steps_do(s: Settings) -> None:
    objs = m.workflow_objects(s, models=MODEL_TYPES, cache_key=KEY)
    steps = grants(objs, m.WORKFLOW_SA, s.namespace, s.namespace)
    assert steps == needed_by_name(objs[-1])
    (role,) = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == m.WORKFLOW_SA]
    assert "*" not in str(role["rules"])


def test_get_and_patch_are_limited_to_the_objects_the_steps_write() -> None:
    """A step's token may not read or change any other TFJob, InferenceService or Service
    of the namespace: only a create (which RBAC cannot limit by name) names none."""
    s = Settings(image=IMAGE, serving_mode="standard", service="mnist")
    objs = m.workflow_objects(s, models=["cnn"], cache_key=KEY)
    steps = grants(objs, m.WORKFLOW_SA, s.namespace, s.namespace)
    unnamed = {(r, v) for _, r, v, name in steps if name == "*"}
    assert unnamed == {
        ("workflowtaskresults", "create"),  # named after the step's node, not known here
        ("workflowtaskresults", "patch"),
        ("tfjobs", "create"),
        ("inferenceservices", "create"),
        ("servingruntimes", "create"),
        ("services", "create"),
    }
    named = {(r, v, name) for _, r, v, name in steps if name != "*"}
    assert named == {
        ("tfjobs", "get", "train-cnn"),
        # The guarded patches: kubectl reads the object, then patches it.
        *(("inferenceservices", v, "mnist") for v in ("get", "patch")),
        *(("servingruntimes", v, m.RUNTIME_NAME) for v in ("get", "patch")),
        *(("services", v, "mnist-ingress") for v in ("get", "patch")),
    }


@pytest.mark.parametrize("mode", ["standard", "knative"])
def test_on_a_cluster_distml_did_not_create_no_service_may_be_written(mode: str) -> None:
    """`deploy` makes no ingress Service there (its node ports are not distml's): neither
    does the Workflow, nor may its steps touch a Service."""
    s = Settings(image=IMAGE, provider=EXISTING, namespace="ml-team", serving_mode=mode)
    objs = m.workflow_objects(s, models=MODEL_TYPES, cache_key=KEY)
    steps = grants(objs, m.WORKFLOW_SA, s.namespace, s.namespace)
    assert not any(r == "services" for _, r, _, _ in steps)


def test_the_derivation_sees_every_step() -> None:
    """With one model the TFJob permissions stay; without the kserve runtime step, the
    servingruntimes permissions go; services only with the standard-mode ingress step."""
    one = needed(build(models=["cnn"]))
    assert ("kubeflow.org", "tfjobs", "create") in one
    assert ("serving.kserve.io", "servingruntimes", "patch") in one
    assert not any(r == "services" for _, r, _ in one)
    tfs = needed(build(Settings(image=IMAGE, predictor="tfserving")))
    assert not any(r == "servingruntimes" for _, r, _ in tfs)
    assert ("serving.kserve.io", "inferenceservices", "get") in tfs
    standard = needed(build(Settings(image=IMAGE, serving_mode="standard")))
    assert {("", "services", v) for v in ("create", "patch")} <= standard


def test_the_workflow_runs_as_its_own_namespaced_service_account() -> None:
    objs = m.workflow_objects(S, models=MODEL_TYPES, cache_key=KEY)
    kinds = [o["kind"] for o in objs]
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(kinds)
    sa, role, binding = objs[:3]
    assert sa["metadata"]["name"] == role["metadata"]["name"] == m.WORKFLOW_SA
    # Where Argo's controller looks.
    in_argo = {m.workflow_cache_name(S.namespace), m.cache_writer_name(S.namespace)}
    for o in objs:
        want = ARGO_NAMESPACE if o["metadata"]["name"] in in_argo else S.namespace
        assert o["metadata"]["namespace"] == want, o["metadata"]["name"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": m.WORKFLOW_SA,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": m.WORKFLOW_SA, "namespace": S.namespace}
    ]
    assert objs[-1]["spec"]["serviceAccountName"] == m.WORKFLOW_SA


# -- Argo's controller and the memoization cache ---------------------------------------


def install_yaml() -> list[dict[str, Any]]:
    return upstream.objects(versions.ARGO_WORKFLOWS_URL)


def test_the_cache_namespace_was_read_at_the_pinned_argo_version() -> None:
    """Where the controller keeps caches is read from v4.1.2's source (controller.go:235,
    cache/cache.go:98; unchanged on the default branch of 2026-08-21). A new pin must
    re-read it, and move the cache and its Role (k8s.manifests.argo_rbac) if it moved."""
    assert "/v4.1.2/" in versions.ARGO_WORKFLOWS_URL, "re-read Argo's cache namespace"


def test_the_controller_service_account_is_install_yaml_s() -> None:
    (controller,) = [
        o
        for o in install_yaml()
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "workflow-controller"
    ]
    assert controller["metadata"]["namespace"] == ARGO_NAMESPACE
    assert controller["spec"]["template"]["spec"]["serviceAccountName"] == ARGO_CONTROLLER_SA
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in install_yaml()
        if o["kind"] == "ServiceAccount"
    }
    assert (ARGO_NAMESPACE, ARGO_CONTROLLER_SA) in accounts


@pytest.mark.parametrize("s", MATRIX)
def test_the_controller_may_do_exactly_what_memoization_needs(s: Settings) -> None:
    objs = m.workflow_objects(s, models=MODEL_TYPES, cache_key=KEY)
    need = controller_needs(objs[-1])
    assert need, "no memoized template: the derivation sees nothing"
    ours = grants(objs, ARGO_CONTROLLER_SA, ARGO_NAMESPACE, ARGO_NAMESPACE)
    assert ours == need  # that ConfigMap only, those verbs only
    both = ours | grants(install_yaml(), ARGO_CONTROLLER_SA, ARGO_NAMESPACE, ARGO_NAMESPACE)
    assert all(covers(both, n) for n in need)
    # Nothing for the controller in the project namespace: it never looks there.
    assert not grants(objs, ARGO_CONTROLLER_SA, ARGO_NAMESPACE, s.namespace)
    cache_name = m.workflow_cache_name(s.namespace)
    (cache,) = [o for o in objs if o["metadata"]["name"] == cache_name]
    assert cache["metadata"]["namespace"] == ARGO_NAMESPACE
    # The cache exists before the Workflow does: the controller never has to create it.
    kinds_names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert kinds_names.index(("ConfigMap", cache_name)) < kinds_names.index(
        ("Workflow", m.WORKFLOW_NAME)
    )


def test_without_the_cache_role_the_controller_cannot_save_an_entry() -> None:
    """install.yaml's argo-cluster-role grants configmaps get/list/watch only: the Role
    is what lets the controller save (and re-read) the ingestion step's cache entry."""
    objs = m.workflow_objects(S, models=MODEL_TYPES, cache_key=KEY)
    dropped = [o for o in objs if o["metadata"]["name"] != m.cache_writer_name(S.namespace)]
    assert len(dropped) == len(objs) - 2
    have = grants(dropped + install_yaml(), ARGO_CONTROLLER_SA, ARGO_NAMESPACE, ARGO_NAMESPACE)
    missing = {n for n in controller_needs(objs[-1]) if not covers(have, n)}
    assert missing == {("", "configmaps", "update", m.workflow_cache_name(S.namespace))}


def test_the_cache_role_is_namespaced_and_bound_to_the_controller_only() -> None:
    role, binding = m.cache_writer_rbac(S)
    assert (role["kind"], binding["kind"]) == ("Role", "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == ARGO_NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": m.cache_writer_name(S.namespace),
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": ARGO_CONTROLLER_SA, "namespace": ARGO_NAMESPACE}
    ]
    for obj in (role, binding):
        assert k8s_schemas.validate(obj) == [], obj["kind"]


# -- one namespace's objects in Argo's namespace are never another's --------------------


def in_argo(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {
        (o["kind"], o["metadata"]["name"]) for o in objs if o["metadata"]["namespace"] == "argo"
    }


def test_two_namespaces_share_nothing_in_argos_namespace() -> None:
    """One namespace's `down` deletes its cache, Role and RoleBinding by name: another
    namespace's must have other names, and its Role must not grant on the other's cache."""
    a, b = (Settings(image=IMAGE, namespace=ns) for ns in ("team-a", "team-b"))
    objs_a, objs_b = (m.workflow_objects(s, models=["cnn"], cache_key=KEY) for s in (a, b))
    assert len(in_argo(objs_a)) == 3
    assert not in_argo(objs_a) & in_argo(objs_b)
    for s, objs in ((a, objs_a), (b, objs_b)):
        cached = grants(objs, ARGO_CONTROLLER_SA, ARGO_NAMESPACE, ARGO_NAMESPACE)
        assert {name for *_, name in cached} == {m.workflow_cache_name(s.namespace)}
        (ingest,) = [t for t in objs[-1]["spec"]["templates"] if "memoize" in t]
        assert ingest["memoize"]["cache"]["configMap"]["name"] == m.workflow_cache_name(s.namespace)


@pytest.mark.parametrize("namespace", ["a", "ml-team", "n" * 63, "n" * 40 + "-" + "x" * 22])
def test_names_in_argos_namespace_stay_dns_labels_for_any_namespace(namespace: str) -> None:
    names = {m.workflow_cache_name(namespace), m.cache_writer_name(namespace)}
    assert all(m.is_dns_label(n) for n in names), names
    assert len(names) == 2
    s = Settings(image=IMAGE, namespace=namespace)
    for obj in m.workflow_objects(s, models=["cnn"], cache_key=KEY)[3:6]:
        assert k8s_schemas.validate(obj) == [], obj["kind"]


def test_long_namespaces_that_share_a_prefix_get_different_names() -> None:
    one, two = "n" * 60 + "one", "n" * 60 + "two"
    assert m.workflow_cache_name(one) != m.workflow_cache_name(two)
    assert m.cache_writer_name(one) != m.cache_writer_name(two)
    assert m.workflow_cache_name("ml-team") == "distml-workflow-cache-ml-team"


def controller_deployment(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "workflow-controller", "namespace": "argo"},
        "spec": {"template": {"spec": spec}},
    }


@pytest.mark.parametrize(
    ("deployment", "sa"),
    [
        (
            controller_deployment({"serviceAccountName": "argo-workflows-workflow-controller"}),
            "argo-workflows-workflow-controller",
        ),  # a Helm install's
        (controller_deployment({"serviceAccountName": "argo"}), "argo"),
        (controller_deployment({"containers": []}), "default"),  # names none: the default
        (None, ARGO_CONTROLLER_SA),  # cannot be read: install.yaml's
        ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}}, ARGO_CONTROLLER_SA),
    ],
    ids=["helm", "install-yaml", "none-named", "unreadable", "no-template"],
)
def test_the_controller_service_account_is_read_from_its_deployment(deployment, sa) -> None:
    assert m.controller_service_account(deployment) == sa


def test_the_cache_role_is_bound_to_the_service_account_given() -> None:
    helm = "argo-workflows-workflow-controller"
    objs = m.workflow_objects(S, models=["cnn"], cache_key=KEY, controller_sa=helm)
    need = controller_needs(objs[-1])
    assert grants(objs, helm, ARGO_NAMESPACE, ARGO_NAMESPACE) == need
    assert not grants(objs, ARGO_CONTROLLER_SA, ARGO_NAMESPACE, ARGO_NAMESPACE)
