"""k8s.client.access: what distml needs in its namespace, derived from what it writes; RBAC's
rule matching; the Role and RoleBinding that grant exactly the missing verbs (valid
against Kubernetes' schemas, minimal); the refusal's words."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

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
    role = access.role(NS, missing, "alice")
    granted = {
        Need(group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == set(missing)
    assert (
        role["metadata"]["name"] == access.role_name("alice")
        and role["metadata"]["namespace"] == NS
    )
    assert all("*" not in str(rule) for rule in role["rules"])


def test_the_binding_names_the_user_or_the_service_account():
    binding = access.role_binding(NS, "alice")
    assert binding["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": access.role_name("alice"),
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


# ------------------------------------------------------------------ every user's rights their own


def test_each_user_s_role_and_binding_are_their_own_so_a_second_file_replaces_nothing():
    names = {
        u: access.role_name(u) for u in ("alice", "bob", "Alice", "system:serviceaccount:ci:runner")
    }
    assert len(set(names.values())) == len(names)  # "alice" and "Alice" too
    for user, name in names.items():
        (role, binding) = yaml.safe_load_all(
            access.access_yaml(NS, [Need("", "pods", "get")], user)
        )
        assert role["metadata"]["name"] == binding["metadata"]["name"] == name
        assert binding["roleRef"]["name"] == name and name.startswith("distml-user-")


@given(st.text(min_size=1, max_size=300))
def test_any_user_name_gives_a_valid_role_name(username: str):
    from k8s.manifests.names import is_dns_subdomain

    name = access.role_name(username)
    assert is_dns_subdomain(name) and len(name) <= 80, name
    assert name == access.role_name(username)  # stable: the admin's file and a rerun agree


def _swept(**options: bool) -> list:
    from runtime.cluster.down import swept

    s = Settings(image="distml:abc", provider="existing", namespace=NS, serving_mode="standard",
                 **options)  # fmt: skip
    return access.needs(s, ["cnn"], swept(s))


def test_without_argo_or_monitoring_no_right_on_rbac_secrets_or_workflows_is_asked():
    asked = {n.resource for n in _swept()}
    assert not asked & {"roles", "rolebindings", "secrets", "serviceaccounts", "workflows"}
    assert {"roles", "rolebindings", "secrets", "configmaps"} <= {
        n.resource for n in _swept(with_monitoring=True)
    }
    assert "workflows" in {n.resource for n in _swept(with_argo=True)}


def test_deploy_s_reads_of_the_autoscalers_and_the_canary_s_objects_are_asked():
    asked = set(_swept())
    for resource, group in (
        ("scaledobjects", "keda.sh"),
        ("horizontalpodautoscalers", "autoscaling"),
    ):
        assert {Need(group, resource, "get"), Need(group, resource, "delete")} <= asked
    # deploy --canary: its own pod and Service (apply, delete), and `down` sweeps them
    for verb in ("get", "create", "patch", "delete", "list"):
        assert Need("", "services", verb) in asked and Need("", "pods", verb) in asked


def test_what_the_built_in_edit_role_lacks_is_what_the_docs_say():
    """Kubernetes v1.33.1's ClusterRole edit (read off the kind cluster integration/kindbuild
    builds): what a user bound to it lacks for the chain, as docs/existing-cluster.md lists
    it; with --with-monitoring, Roles and RoleBindings too (edit holds no RBAC)."""
    import json
    from pathlib import Path

    edit = json.loads((Path(__file__).parent / "edit-clusterrole-v1.33.1.json").read_text())

    def lacks(**options: bool) -> list[str]:
        return access.listing(n for n in _swept(**options) if not access.allows(edit["rules"], n))

    assert lacks() == EDIT_LACKS
    assert sorted(set(lacks(with_monitoring=True)) - set(EDIT_LACKS)) == [
        "rolebindings.rbac.authorization.k8s.io: get, list, create, patch, delete",
        "roles.rbac.authorization.k8s.io: get, list, create, patch, delete",
    ]
    docs = (Path(__file__).parents[3] / "docs" / "existing-cluster.md").read_text()
    assert all(f"`{line}`" in docs for line in EDIT_LACKS)


EDIT_LACKS = [
    "scaledobjects.keda.sh: get, delete",
    "tfjobs.kubeflow.org: get, list, create, patch, delete",
    "inferenceservices.serving.kserve.io: get, list, create, patch, delete",
    "servingruntimes.serving.kserve.io: get, list, create, patch, delete",
]
