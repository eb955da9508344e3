"""k8s.install.operator_proof, through ``survey`` and ``Installer.survey``: a user whose
rights end at their namespace (the operators' namespaces answer 403) finds the operators
by API discovery and a dry run in their own namespace. A 403 is never taken as missing
(nothing is installed over it) nor as found without that proof; any other failure (a
5xx, a timeout, an unreachable server) fails with what happened."""

from __future__ import annotations

from typing import Any

import pytest
from invoke import Config, MockContext, Result

from k8s.client.kube import KubeError
from k8s.install.operator_check import PROBES, MissingOperators, survey
from k8s.install.operator_proof import SERVED, discovered, probe_object
from k8s.install.operators import Installer, components
from k8s.providers import provider as make_provider
from k8s.providers.settings import Settings
from tests.support.fakekube import FakeKube

NS = "team-b"
SETTINGS = Settings(
    image="registry.example.com/distml:t", provider="existing", namespace=NS,
    serving_mode="standard",
)  # fmt: skip


def kubectl(args: str) -> str:
    return f"kubectl --context alice@byo {args}"


class NamespaceUser(FakeKube):
    """Reads of Deployments outside ``own`` answer ``status`` (403: forbidden)."""

    def __init__(self, status: int | None = 403, own: str = NS) -> None:
        super().__init__()
        self.status, self.own = status, own

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        if kind == "Deployment" and namespace != self.own:
            why = {403: "deployments.apps is forbidden", 503: "the server is unavailable"}
            raise KubeError(
                f"get Deployment {namespace}/{name} failed: "
                + why.get(self.status or 0, "timed out"),
                status=self.status,
            )
        return super().get(api_version, kind, name, namespace)


def serving(fake: FakeKube, *steps: str) -> FakeKube:
    for step in steps:
        for api, kind in SERVED[step]:
            fake.serve_kind(api, kind)
    return fake


# ------------------------------------------------------------------ found
def test_the_training_operator_is_found_by_discovery_and_an_admitted_dry_run():
    fake = serving(NamespaceUser(), "training_operator")
    finding = survey(fake, "training_operator", kubectl, settings=SETTINGS)
    assert finding.found and not finding.missing and not finding.blocked
    assert finding.proof == (
        "found by API discovery (kubeflow.org/v1 TFJob served) and a dry-run TFJob admitted "
        "(the training operator's webhook answers); its namespace kubeflow cannot be read"
    )
    (probe,) = fake.dry_runs  # dry run only: nothing stored
    assert probe["kind"] == "TFJob" and probe["metadata"]["namespace"] == NS
    assert probe["metadata"]["name"].startswith("distml-probe-")
    assert fake.applied == [] and fake.objects == {}


@pytest.mark.parametrize("step", ["kserve", "cert_manager"])
def test_kserve_and_cert_manager_are_proven_by_an_admitted_inference_service(step):
    fake = serving(NamespaceUser(), step)
    finding = survey(fake, step, kubectl, settings=SETTINGS)
    assert finding.found, finding.blocked
    assert "a dry-run InferenceService admitted (KServe's webhooks answer" in finding.proof
    assert [o["kind"] for o in fake.dry_runs] == ["InferenceService"]


def test_metrics_server_is_proven_by_its_api_answering_in_the_namespace():
    fake = serving(NamespaceUser(), "metrics_server")
    finding = survey(fake, "metrics_server", kubectl, settings=SETTINGS)
    assert finding.found
    assert f"a list of PodMetrics in {NS} answered" in finding.proof
    assert ("list", ("metrics.k8s.io/v1beta1", "PodMetrics", NS, None)) in fake.calls


def test_the_installer_says_how_each_was_found_and_installs_nothing_over_them():
    fake = serving(NamespaceUser(), *PROBES)
    said: list[str] = []
    ran: list[str] = []
    ctx = MockContext(config=Config(overrides={"run": {"dry": False}}))
    ctx.run = lambda command, **_: ran.append(command) or Result()  # type: ignore[method-assign]
    p = make_provider("existing", kube_context="alice@byo")
    inst = Installer(ctx, fake, p, SETTINGS, said.append, fake.clock, install_missing=True)
    inst.survey(components("existing", "standard"))
    assert ran == [] and fake.applied == []
    assert said[0].startswith("Kubeflow training operator v1.9.0: found by API discovery")
    assert "its version cannot be read; distml pins v1-5170a36" in said[0]
    assert len(said) == len(components("existing", "standard"))


# ------------------------------------------------------------------ never missing
def test_a_kind_not_served_is_blocked_not_missing_and_never_installed():
    fake = NamespaceUser()  # nothing served
    finding = survey(fake, "training_operator", kubectl, settings=SETTINGS)
    assert not finding.found and not finding.missing
    assert "its namespace kubeflow cannot be read here (forbidden)" in finding.blocked
    assert "API discovery says kubeflow.org/v1 TFJob not served: it is not installed" in (
        finding.blocked
    )
    assert "kubectl --context alice@byo apply --server-side" in finding.blocked
    assert fake.dry_runs == []


def test_install_operators_installs_nothing_when_a_namespace_is_forbidden():
    fake = NamespaceUser()
    ran: list[str] = []
    ctx = MockContext(config=Config(overrides={"run": {"dry": False}}))
    ctx.run = lambda command, **_: ran.append(command) or Result()  # type: ignore[method-assign]
    p = make_provider("existing", kube_context="alice@byo")
    inst = Installer(ctx, fake, p, SETTINGS, lambda _: None, fake.clock, install_missing=True)
    with pytest.raises(MissingOperators, match="distml will not install over"):
        inst.survey(components("existing", "standard"))
    assert ran == [] and fake.applied == []


@pytest.mark.parametrize("step", ["argo", "keda", "istio", "knative"])
def test_discovery_alone_never_makes_a_step_found(step):
    fake = serving(NamespaceUser(), step)
    finding = survey(fake, step, kubectl, settings=SETTINGS)
    assert not finding.found and not finding.missing
    assert "nothing a user of one namespace may do proves it runs" in finding.blocked
    assert fake.dry_runs == []


def test_without_a_namespace_to_dry_run_in_it_is_blocked():
    fake = serving(NamespaceUser(), "training_operator")
    finding = survey(fake, "training_operator", kubectl)  # no settings: e.g. a reader
    assert finding.blocked and not finding.found and fake.dry_runs == []


@pytest.mark.parametrize(
    "error",
    [
        KubeError('admission webhook "validator.tfjob" denied the request: bad', status=400),
        KubeError(
            'Internal error occurred: failed calling webhook "validator.tfjob": connection refused',
            status=500,
        ),
        KubeError("tfjobs.kubeflow.org is forbidden: cannot create", status=403),
    ],
    ids=["refused by the webhook", "the webhook does not answer", "create not allowed"],
)
def test_a_refused_dry_run_is_blocked_with_the_api_servers_answer(error):
    fake = serving(NamespaceUser(), "training_operator")
    fake.fail("create", error)
    finding = survey(fake, "training_operator", kubectl, settings=SETTINGS)
    assert not finding.found and not finding.missing
    assert "a dry-run TFJob was refused: " + str(error) in finding.blocked


# ------------------------------------------------------------------ only a 403 lowers it
@pytest.mark.parametrize("status", [503, 500, None], ids=["5xx", "500", "timeout/unreachable"])
def test_anything_but_a_403_on_the_deployment_fails_with_what_happened(status):
    fake = serving(NamespaceUser(status=status), "training_operator")
    with pytest.raises(KubeError, match="get Deployment kubeflow/training-operator failed"):
        survey(fake, "training_operator", kubectl, settings=SETTINGS)
    assert not any(c[0] == "served" for c in fake.calls)


def test_a_dry_run_that_gets_no_answer_fails_with_what_happened():
    fake = serving(NamespaceUser(), "training_operator")
    fake.fail("create", KubeError("create (dry run) TFJob: read timed out", status=None))
    with pytest.raises(KubeError, match="read timed out"):
        survey(fake, "training_operator", kubectl, settings=SETTINGS)


def test_a_5xx_of_the_api_server_itself_on_the_dry_run_fails():
    fake = serving(NamespaceUser(), "training_operator")
    fake.fail("create", KubeError("etcdserver: request timed out", status=504))
    with pytest.raises(KubeError, match="etcdserver"):
        survey(fake, "training_operator", kubectl, settings=SETTINGS)


def test_a_discovery_that_fails_fails_with_what_happened():
    fake = NamespaceUser()
    fake.fail("served", KubeError("discover TFJob (kubeflow.org/v1): API discovery failed"))
    with pytest.raises(KubeError, match="API discovery failed"):
        survey(fake, "training_operator", kubectl, settings=SETTINGS)


# ------------------------------------------------------------------ pieces
def test_discovery_names_what_is_missing_of_a_step_with_two_kinds():
    fake = FakeKube()
    fake.serve_kind("serving.kserve.io/v1beta1", "InferenceService")
    assert discovered(fake, "kserve") == (
        False,
        "serving.kserve.io/v1alpha1 ServingRuntime not served",
    )
    fake.serve_kind("serving.kserve.io/v1alpha1", "ServingRuntime")
    served, said = discovered(fake, "kserve")
    assert served and said.endswith("ServingRuntime served")


def test_every_step_has_the_kinds_that_find_it():
    assert set(SERVED) == set(PROBES)


@pytest.mark.parametrize("kind", ["TFJob", "InferenceService"])
def test_a_probe_is_distmls_own_object_under_a_throwaway_name(kind):
    a, b = probe_object(kind, SETTINGS), probe_object(kind, SETTINGS)
    assert a["kind"] == kind and a["metadata"]["namespace"] == NS
    assert a["metadata"]["name"] != b["metadata"]["name"]
