"""k8s.client.access: what distml needs in its namespace, derived from what it writes; RBAC's
rule matching; the Role and RoleBinding that grant exactly the missing verbs (valid
against Kubernetes' schemas, minimal); the refusal's words."""

from __future__ import annotations

import pytest
import yaml

from k8s.client import access
from k8s.client.access import Need
from k8s.client.ownership import written_names
from k8s.providers.settings import Settings
from runtime.cluster.down import OURS
from tests.support.k8s_schemas import validate

NS = "team-b"
MODELS = ("cnn", "cnn_dropout")


def settings(**kw) -> Settings:
    return Settings(image="registry.example.com/d:t", provider="existing", namespace=NS, **kw)


def verbs(needs: list[Need], resource: str, group: str = "") -> list[str]:
    return [n.verb for n in needs if (n.group, n.resource) == (group, resource)]


# ------------------------------------------------------------------ needs
def test_every_object_distml_writes_by_name_can_be_read_applied_and_deleted():
    needs = set(access.needs(settings(), MODELS, OURS))
    for api, kind, _ in written_names(settings(), MODELS):
        for verb in ("get", "create", "patch", "delete"):  # apply is create + patch
            assert Need(access.group_of(api), access.resource_of(kind), verb) in needs


def test_the_crds_kinds_are_asked_for_with_every_verb_distml_uses():
    needs = access.needs(settings(), MODELS, OURS)
    full = ["get", "list", "create", "patch", "delete"]
    assert verbs(needs, "tfjobs", "kubeflow.org") == full
    assert verbs(needs, "inferenceservices", "serving.kserve.io") == full
    assert verbs(needs, "servingruntimes", "serving.kserve.io") == full
    assert verbs(needs, "jobs", "batch") == full


def test_what_the_tasks_do_with_pods_is_asked_for():
    needs = access.needs(settings(), MODELS, OURS)
    assert verbs(needs, "pods/log") == ["get"]
    assert verbs(needs, "pods/exec") == ["create"]
    assert verbs(needs, "pods/portforward") == ["create"]
    assert verbs(needs, "events") == ["list", "create"]  # create: a canary's decisions


def test_what_down_sweeps_by_label_can_be_listed_and_deleted():
    needs = set(access.needs(settings(), MODELS, OURS))
    for api, kind in OURS:
        for verb in ("list", "delete"):
            assert Need(access.group_of(api), access.resource_of(kind), verb) in needs


def test_no_prometheus_objects_are_written_unless_distmls_own_is_used():
    plain = access.needs(settings(), MODELS, ())
    assert verbs(plain, "configmaps") == [] and verbs(plain, "services/proxy") == []
    own = access.needs(settings(with_monitoring=True), MODELS, ())
    assert "create" in verbs(own, "configmaps") and "create" in verbs(own, "deployments", "apps")
    assert verbs(own, "services/proxy") == ["get"]
    yours = access.needs(settings(with_monitoring=True, prometheus="mon/prom:9090"), MODELS, ())
    assert verbs(yours, "configmaps") == [] and verbs(yours, "services/proxy") == []


def test_argo_adds_its_workflow_and_rbac_and_what_its_role_grants():
    assert verbs(access.needs(settings(), MODELS, ()), "workflows", "argoproj.io") == []
    needs = access.needs(settings(with_argo=True), MODELS, ())
    assert "create" in verbs(needs, "workflows", "argoproj.io")
    assert "create" in verbs(needs, "roles", "rbac.authorization.k8s.io")
    assert "create" in verbs(needs, "rolebindings", "rbac.authorization.k8s.io")
    assert "create" in verbs(needs, "serviceaccounts")
    # RBAC's escalation check: the steps' Role grants these, so its creator must hold them.
    assert verbs(needs, "workflowtaskresults", "argoproj.io") == ["create", "patch"]


def test_a_pull_secret_is_read_only_when_one_is_named():
    assert verbs(access.needs(settings(), MODELS, ()), "secrets") == []
    named = access.needs(settings(image_pull_secret="regcred"), MODELS, ())
    assert verbs(named, "secrets") == ["get"]


# ------------------------------------------------------------------ allows
@pytest.mark.parametrize(
    "rule, granted",
    [
        ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}, True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, False),
        ({"verbs": ["list"], "apiGroups": [""], "resources": ["pods/log"]}, False),
        ({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["pods/log"]}, False),
        (
            {
                "verbs": ["get"],
                "apiGroups": [""],
                "resources": ["pods/log"],
                "resourceNames": ["x"],
            },
            False,
        ),
    ],
    ids=[
        "all",
        "exact",
        "any resource's subresource",
        "the resource is not its subresource",
        "another verb",
        "another group",
        "only some names",
    ],
)
def test_rules_match_as_rbac_matches_them(rule, granted):
    assert access.allows([rule], Need("", "pods/log", "get")) is granted


# ------------------------------------------------------------------ the Role
def missing_of_an_admin() -> list[Need]:
    """What a user with ClusterRole admin lacks: the CRDs' kinds (no aggregated role)."""
    return [
        n
        for n in access.needs(settings(), MODELS, OURS)
        if n.group in ("kubeflow.org", "serving.kserve.io", "argoproj.io")
    ]


def test_the_role_and_binding_are_strictly_valid_kubernetes_objects():
    docs = list(yaml.safe_load_all(access.access_yaml(NS, missing_of_an_admin(), "alice")))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    for doc in docs:
        assert validate(doc) == [], doc["kind"]


def test_the_role_grants_exactly_the_missing_verbs_and_nothing_else():
    missing = missing_of_an_admin()
    role = access.role(NS, missing)
    granted = {
        Need(group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == set(missing)
    assert role["metadata"]["name"] == "distml-user" and role["metadata"]["namespace"] == NS
    assert all("*" not in str(rule) for rule in role["rules"])


def test_the_binding_names_the_user_or_the_service_account():
    binding = access.role_binding(NS, "alice")
    assert binding["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "distml-user",
    }
    sa = access.role_binding(NS, "system:serviceaccount:ci:runner")["subjects"]
    assert sa == [{"kind": "ServiceAccount", "name": "runner", "namespace": "ci"}]


def test_the_refusal_names_the_namespace_every_missing_verb_the_yaml_and_the_command():
    missing = [Need("kubeflow.org", "tfjobs", "create"), Need("kubeflow.org", "tfjobs", "get")]
    text = access.access_yaml(NS, missing, "alice")
    message = access.refusal(NS, "alice", missing, text, "invoke access-role --out f.yaml")
    assert "alice lacks the rights distml needs in namespace team-b" in message
    assert "  - tfjobs.kubeflow.org: get, create" in message
    assert text.strip() in message
    assert "`invoke access-role --out f.yaml`" in message


def test_an_unknown_user_is_a_placeholder_said_as_such():
    message = access.refusal(NS, access.USER_PLACEHOLDER, [], "", "cmd")
    assert message.startswith("this user lacks the rights distml needs")
    assert "replace USER with your user name" in message


# ------------------------------------------------------------------ reviews
def test_the_reviews_are_what_the_api_takes():
    assert access.rules_review(NS) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": NS},
    }
    attributes = access.access_review(NS, Need("", "pods/exec", "create"))["spec"]
    assert attributes["resourceAttributes"] == {
        "namespace": NS, "verb": "create", "group": "", "resource": "pods",
        "subresource": "exec",
    }  # fmt: skip
    for review in (access.rules_review(NS), access.access_review(NS, Need("", "pods", "get"))):
        assert validate({**review, "metadata": {"name": "x"}}) == []  # the helper wants a name
