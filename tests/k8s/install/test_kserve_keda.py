"""k8s.install.kserve_keda: KServe's controller pods that started before KEDA's ScaledObject
CRD was made (KServe 0.20 watches ScaledObjects only when the CRD exists at its start), by
the API's own timestamps; on a cluster distml made, `up --with-monitoring` restarts the
controller after it installs KEDA; on any other it says so and runs nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from invoke import Config, MockContext, Result

from k8s.client.kube import KubeError
from k8s.install import kserve_keda as kk
from k8s.install.operators import Installer
from k8s.providers import provider as make_provider
from k8s.providers.settings import Settings
from tests.support.fakekube import FakeKube

CRD_MADE = "2026-12-05T08:00:00Z"


def crd(fake: FakeKube, made: str = CRD_MADE) -> None:
    fake.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
              "metadata": {"name": kk.SCALEDOBJECT_CRD, "creationTimestamp": made}})  # fmt: skip


def controller_pod(fake: FakeKube, name: str, started: str) -> None:
    labels = {"control-plane": kk.KSERVE_CONTROLLER}
    fake.put({"apiVersion": "v1", "kind": "Pod", "status": {"startTime": started},
              "metadata": {"name": name, "namespace": "kserve", "labels": labels}})  # fmt: skip


def test_a_controller_that_started_before_the_crd_is_named():
    fake = FakeKube()
    crd(fake)
    controller_pod(fake, "kserve-controller-manager-old", "2026-12-05T07:59:50Z")
    controller_pod(fake, "kserve-controller-manager-new", "2026-12-05T08:00:10Z")
    assert kk.started_before_keda(fake) == ["kserve-controller-manager-old"]


def test_nothing_to_say_without_keda_or_without_the_rights_to_look():
    fake = FakeKube()
    controller_pod(fake, "kserve-controller-manager-old", "2026-12-05T07:59:50Z")
    assert kk.started_before_keda(fake) == []  # no CRD: KEDA is not there
    crd(fake)
    fake.fail("get", KubeError("customresourcedefinitions is forbidden", status=403))
    assert kk.started_before_keda(fake) == []  # a user of one namespace: not knowable
    fake.fail("get", KubeError("the server is currently unable to handle it", status=503))
    with pytest.raises(KubeError):
        kk.started_before_keda(fake)  # only a 403 lowers the check


def installer(fake: FakeKube, provider: str) -> tuple[Installer, MockContext, list[str]]:
    lines: list[str] = []
    c = MockContext(config=Config(overrides={"run": {"dry": False}}),
                    run={re.compile("^kubectl .*"): Result(exited=0)}, repeat=True)  # fmt: skip
    s = Settings(image="r/distml:0123456789ab", provider=provider, serving_mode="standard",
                 with_monitoring=True, namespace="team-a")  # fmt: skip
    kw: dict[str, Any] = {"kube_context": "team"} if provider == "existing" else {}
    inst = Installer(c, fake, make_provider(provider, **kw), s, lines.append, fake.clock)
    return inst, c, lines


def test_on_a_cluster_distml_made_the_controller_is_restarted_and_waited_for():
    fake = FakeKube()
    crd(fake)
    controller_pod(fake, "kserve-controller-manager-old", "2026-12-05T07:59:50Z")
    inst, c, lines = installer(fake, "kind")
    inst._kserve_watches_keda()
    ran = [call.args[0] for call in c.run.call_args_list]
    kc = "kubectl --context kind-dist-ml "
    assert ran == [
        f"{kc}-n kserve rollout restart deployment/kserve-controller-manager",
        f"{kc}-n kserve rollout status deployment/kserve-controller-manager --timeout "
        f"{int(inst.timeout)}s",
    ]
    assert lines == ["KServe's controller: restarted, so that it watches KEDA's ScaledObjects"]


def test_on_a_cluster_not_distml_s_it_is_said_and_nothing_runs():
    fake = FakeKube()
    crd(fake)
    controller_pod(fake, "kserve-controller-manager-old", "2026-12-05T07:59:50Z")
    inst, c, lines = installer(fake, "existing")
    inst._kserve_watches_keda()
    assert c.run.call_args_list == []
    (line,) = lines
    assert line.startswith("note: KServe's controller (kserve-controller-manager-old) started")
    assert line.endswith(
        "ask its admin to run `kubectl --context team -n kserve rollout restart "
        "deployment/kserve-controller-manager`"
    )


def test_a_controller_started_after_keda_needs_nothing():
    fake = FakeKube()
    crd(fake)
    controller_pod(fake, "kserve-controller-manager-new", "2026-12-05T08:00:10Z")
    inst, c, lines = installer(fake, "kind")
    inst._kserve_watches_keda()
    assert c.run.call_args_list == [] and lines == []


def test_the_selector_is_the_label_kserve_s_release_gives_the_controller_s_pods():
    from k8s.install import versions
    from tests.support.upstream import objects

    (deployment,) = [
        o for o in objects(versions.KSERVE_URL)
        if o["kind"] == "Deployment" and o["metadata"]["name"] == kk.KSERVE_CONTROLLER
    ]  # fmt: skip
    assert deployment["metadata"]["namespace"] == kk.KSERVE_NAMESPACE
    key, value = kk.CONTROLLER_SELECTOR.split("=")
    assert deployment["spec"]["template"]["metadata"]["labels"][key] == value
