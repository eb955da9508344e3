"""runtime/cluster/access_check.py: before `up` writes anything on an existing cluster, the
API is asked what this user may do in the namespace (a SelfSubjectRulesReview; per verb a
SelfSubjectAccessReview when that review is incomplete), and `up` is refused, naming every
missing verb with the Role and RoleBinding that grant them and the task that writes them.
A cluster distml made is not asked; a failure to ask is said, never taken as an answer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml

from k8s.client import access
from k8s.client.kube import KubeError
from runtime.cluster import ClusterError, access_check, existing_up
from runtime.requests import UpRequest
from tests.runtime.cluster.test_existing_up import (
    CTX,
    NS,
    existing,
    kube_system,
    node,
    operators_available,
    results,
    storage_class,
)
from tests.support.cluster_kit import make_ctx
from tests.support.fakekube import FakeKube

# ClusterRole admin's rules as the API lists them for its namespace (abridged: what distml
# needs of the core, apps, batch and rbac groups, none of the CRDs' kinds).
ADMIN_RULES = [
    {"verbs": ["*"], "apiGroups": [""], "resources": ["pods", "pods/log", "pods/exec",
     "pods/portforward", "services", "services/proxy", "configmaps", "persistentvolumeclaims",
     "serviceaccounts", "events", "secrets", "endpoints"]},
    {"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"]},
    {"verbs": ["*"], "apiGroups": ["batch"], "resources": ["jobs"]},
    {"verbs": ["*"], "apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"]},
    {"verbs": ["*"], "apiGroups": ["rbac.authorization.k8s.io"],
     "resources": ["roles", "rolebindings"]},
    {"verbs": ["*"], "apiGroups": ["argoproj.io"], "resources": ["workflows"]},  # aggregated
]  # fmt: skip


def rules(resource_rules: list[dict[str, Any]], incomplete: bool = False, error: str = ""):
    status = {"resourceRules": resource_rules, "incomplete": incomplete}
    return lambda _: {**status, **({"evaluationError": error} if error else {})}


def as_alice(fake: FakeKube) -> FakeKube:
    fake.answer_create("SelfSubjectReview", lambda _: {"userInfo": {"username": "alice"}})
    return fake


def reviews(fake: FakeKube, kind: str) -> list[dict[str, Any]]:
    return [o for o in fake.created if o["kind"] == kind]


def settings(cx, **kw):
    return cx.settings(serving_mode="standard", **kw)


@pytest.fixture
def cx(wd, fake):
    wd.create()
    return existing(make_ctx(fake, results()), wd, fake, []).cx


# ------------------------------------------------------------------ the rules review
def test_an_admin_of_the_namespace_lacks_only_the_crds_kinds(cx, fake):
    fake.answer_create("SelfSubjectRulesReview", rules(ADMIN_RULES))
    found = access_check.review(fake, NS, access_check.wanted(settings(cx)))
    # KEDA ships no ClusterRole aggregated to admin: its ScaledObjects are not the admin's.
    assert {n.resource for n in found.missing} == {
        "tfjobs", "inferenceservices", "servingruntimes", "scaledobjects"
    }  # fmt: skip
    assert found.how == "SelfSubjectRulesReview"
    assert reviews(fake, "SelfSubjectRulesReview") == [access.rules_review(NS)]
    assert reviews(fake, "SelfSubjectAccessReview") == []  # complete: nothing more asked


def test_a_complete_review_granting_everything_lets_up_go_on(cx, fake):
    lines: list[str] = []
    cx.out = lines.append
    access_check.require(cx, settings(cx))  # FakeKube's default: a user who may do all
    assert lines == [f"access: every right distml needs in namespace {NS} (SelfSubjectRulesReview)"]


def test_an_incomplete_review_asks_each_verb_it_does_not_grant(cx, fake):
    fake.answer_create(
        "SelfSubjectRulesReview", rules(ADMIN_RULES, incomplete=True, error="webhook authorizer")
    )
    asked: list[dict[str, Any]] = []

    def answer(review: dict[str, Any]) -> dict[str, Any]:
        attributes = review["spec"]["resourceAttributes"]
        asked.append(attributes)
        return {"allowed": attributes["resource"] == "tfjobs"}  # the webhook grants TFJobs

    fake.answer_create("SelfSubjectAccessReview", answer)
    found = access_check.review(fake, NS, access_check.wanted(settings(cx)))
    assert {a["resource"] for a in asked} == {
        "tfjobs", "inferenceservices", "servingruntimes", "scaledobjects"
    }  # fmt: skip
    assert {n.resource for n in found.missing} == {
        "inferenceservices", "servingruntimes", "scaledobjects"
    }  # fmt: skip
    assert found.how.startswith("SelfSubjectRulesReview incomplete (webhook authorizer); 17 verb")


def test_without_a_rules_review_every_verb_is_asked_by_access_review(cx, fake):
    fake.fail("create", KubeError("the server could not find the requested resource", status=404))
    found = access_check.review(fake, NS, access_check.wanted(settings(cx)))
    needed = access_check.wanted(settings(cx))
    assert found.missing == () and len(reviews(fake, "SelfSubjectAccessReview")) == len(needed)


@pytest.mark.parametrize("status", [None, 500, 503], ids=["unreachable", "500", "503"])
def test_a_review_that_gets_no_answer_fails_with_what_happened(cx, fake, status):
    fake.fail("create", KubeError("create SelfSubjectRulesReview failed: boom", status=status))
    with pytest.raises(KubeError, match="boom"):
        access_check.require(cx, settings(cx))


# ------------------------------------------------------------------ the refusal
def test_up_is_refused_with_every_missing_verb_the_role_and_the_command(cx, fake):
    as_alice(fake).answer_create("SelfSubjectRulesReview", rules(ADMIN_RULES))
    with pytest.raises(ClusterError) as err:
        access_check.require(cx, settings(cx))
    message = str(err.value)
    assert f"alice lacks the rights distml needs in namespace {NS}" in message
    for resource in ("tfjobs.kubeflow.org", "inferenceservices.serving.kserve.io",
                     "servingruntimes.serving.kserve.io"):  # fmt: skip
        assert f"  - {resource}: get, list, create, patch, delete" in message
    assert "pods" not in message.split("missing, per resource:")[1].split("a Role")[0]
    docs = list(yaml.safe_load_all(message.split("cluster-wide):\n")[1].split("\nwrite them")[0]))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    assert docs[1]["subjects"][0]["name"] == "alice"
    assert f"`invoke access-role --context {CTX} --out distml-access-{NS}.yaml`" in message


def test_the_user_is_a_placeholder_when_the_api_cannot_say_who(cx, fake):
    fake.answer_create("SelfSubjectRulesReview", rules(ADMIN_RULES))

    def not_served(_: dict[str, Any]) -> dict[str, Any]:
        raise KubeError("SelfSubjectReview is not served", status=404)

    fake.answer_create("SelfSubjectReview", not_served)
    with pytest.raises(ClusterError, match="this user lacks the rights distml needs") as err:
        access_check.require(cx, settings(cx))
    assert "name: USER" in str(err.value) and "replace USER" in str(err.value)


def test_the_command_carries_argo_and_monitoring_when_up_was_asked_for_them(cx):
    s = settings(cx, with_argo=True, with_monitoring=True)
    assert access_check.command("c", s) == (
        "invoke access-role --context c --with-argo --with-monitoring "
        f"--out distml-access-{NS}.yaml"
    )


def test_up_on_an_existing_cluster_is_refused_before_any_read_or_write(wd, fake):
    node(fake, "node-a")
    kube_system(fake)
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    operators_available(fake)
    as_alice(fake).answer_create("SelfSubjectRulesReview", rules(ADMIN_RULES))
    c = make_ctx(fake, results())
    with pytest.raises(ClusterError, match="lacks the rights distml needs"):
        existing(c, wd, fake, []).up(UpRequest(serving_mode="standard"))
    assert fake.applied == [] and fake.dry_runs == []
    assert not any(call[0] == "get" and call[1][1] == "TFJob" for call in fake.calls)
    assert wd.state().context is None  # claim recorded nothing


def test_claim_asks_first(cx, fake):
    kube_system(fake)
    fake.answer_create("SelfSubjectRulesReview", rules([]))
    with pytest.raises(ClusterError, match="lacks the rights"):
        existing_up.claim(cx, settings(cx), existing_up.reach(cx))
    assert [c[0] for c in fake.calls if c[0] in ("get", "create")][-2:] == ["create", "create"]


def test_a_cluster_distml_made_is_not_asked(cx, fake):
    access_check.require(cx, replace(settings(cx), provider="kind"))
    assert fake.created == []
