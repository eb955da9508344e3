""".github/workflows/integration.yml: the provider x serving-mode matrix (Argo on kind
only), each provider's CLI installed only in its own jobs at the version k8s/install/versions.py
pins or accepts, and the provider handed to ``nox -s integration``."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import yaml

from k8s.install import versions

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "integration.yml"
PROVIDERS = {"kind", "minikube", "k3d"}
MODES = {"knative", "standard"}


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def job(workflow) -> dict:
    return workflow["jobs"]["integration"]


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def _combinations(matrix: dict) -> list[dict]:
    """The jobs GitHub makes of ``matrix``: the product of its lists, then each ``include``
    entry merged into every combination it does not contradict, or added as its own."""
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    assert "exclude" not in matrix
    jobs = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    original = [dict(j) for j in jobs]
    for extra in matrix.get("include", []):
        fits = [
            i for i, o in enumerate(original) if all(o.get(k, v) == v for k, v in extra.items())
        ]
        for i in fits:
            jobs[i].update(extra)
        if not fits:
            jobs.append(dict(extra))
    return jobs


def _step(job: dict, name_start: str) -> dict:
    found = [s for s in job["steps"] if str(s.get("name", "")).startswith(name_start)]
    assert len(found) == 1, f"one step named {name_start!r}…, found {len(found)}"
    return found[0]


def test_the_matrix_is_every_provider_in_both_modes_and_argo_on_kind_only(job):
    assert job["strategy"]["fail-fast"] is False
    jobs = [
        (j["provider"], j["serving-mode"], j["orchestrator"])
        for j in _combinations(job["strategy"]["matrix"])
    ]
    tasks = {j for j in jobs if j[2] == "tasks"}
    argo = {j for j in jobs if j[2] == "argo"}
    assert tasks == {(p, m, "tasks") for p in PROVIDERS for m in MODES}
    assert argo == {("kind", m, "argo") for m in MODES}
    assert len(jobs) == len(tasks) + len(argo)


def test_the_job_and_its_artifact_name_the_provider_mode_and_orchestrator(job):
    for text in (job["name"], _step(job, "Upload reports")["with"]["name"]):
        for axis in ("provider", "serving-mode", "orchestrator"):
            assert f"matrix.{axis}" in text


def test_the_pinned_clis_agree_with_k8s_versions(workflow):
    env = workflow["env"]
    assert env["KIND_VERSION"] == versions.KIND_VERSION
    assert _numbers(env["KIND_VERSION"]) >= versions.MIN_KIND
    assert _numbers(env["K3D_VERSION"]) >= versions.MIN_K3D
    assert _numbers(env["KUBECTL_VERSION"]) >= versions.MIN_KUBECTL
    minikube = getattr(versions, "MINIKUBE_VERSION", None)
    if minikube is None:
        pytest.skip("k8s/install/versions.py pins no MINIKUBE_VERSION yet")
    assert env["MINIKUBE_VERSION"] == minikube


def test_each_provider_is_installed_only_in_its_own_jobs_and_checksum_verified(job):
    for provider in PROVIDERS:
        step = _step(job, f"Install {provider} ")
        assert step.get("if") == f"matrix.provider == '{provider}'"
        assert "sha256sum --check" in step["run"]
        assert f"/usr/local/bin/{provider}" in step["run"]
    kubectl = _step(job, "Install kubectl ")
    assert "if" not in kubectl
    assert "sha256sum --check" in kubectl["run"]


def test_the_nox_step_passes_the_provider_first(job):
    step = _step(job, "nox -s integration")
    assert step["env"]["PROVIDER"] == "${{ matrix.provider }}"
    assert re.match(r'nox -s integration -- "\$PROVIDER"( |$)', step["run"])
    assert job["env"]["DISTML_SERVING_MODE"] == "${{ matrix.serving-mode }}"
    assert "--with-argo" in step["env"]["ARGO_FLAG"]


def test_the_diagnostics_know_each_providers_context_and_logs(job):
    script = _step(job, "Runner diagnostics")["run"]
    for context in ("kind-distml-it", "distml-it", "k3d-distml-it"):
        assert f"context={context}" in script
    assert "kind export logs" in script
    assert 'MINIKUBE_HOME="$mk_home" minikube -p distml-it logs' in script
    assert 'mk_home="$PWD/.distml-integration/minikube"' in script
    assert "docker logs k3d-distml-it-server-0" in script
