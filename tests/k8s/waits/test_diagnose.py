"""k8s.waits.diagnose against tests/support/fakekube.py: a failed TFJob's report finds its pods by
the training operator's label and by the old ``job-name`` one, and leaves out a batch Job's
pod of the same name; every command a hint names is built with the provider's ``kubectl``
(it names the context). (The reports as the waits print them are held in test_tfjobs.py,
test_workload_waits.py and test_isvc_wait.py.)"""

from __future__ import annotations

import pytest

from k8s.waits.diagnose import HINTS, hints, naming_context, tfjob_failure_report, with_hints
from tests.support.fakekube import FakeKube
from tests.support.wait_kit import KUBECTL, NAMED, NS, TF, tfjob_status, unnamed_commands


def test_tfjob_pods_also_found_by_the_old_job_name_label(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", "Failed"))
    fake.add_pod(NS, "cnn-worker-0", {"job-name": "cnn"}, phase="Failed", exit_code=1)
    fake.add_pod(NS, "cnn-copy", {"job-name": "cnn"}, owner_kind="Job")  # a batch Job's pod
    report = tfjob_failure_report(fake, NS, "cnn", kubectl=KUBECTL)
    assert "pod cnn-worker-0: Failed" in report
    assert "cnn-copy" not in report


def test_a_hint_names_the_context_in_each_command_it_gives():
    (pvc,) = hints('persistentvolumeclaim "strategy-volume" not found', KUBECTL)
    assert f"(`{NAMED}get pvc,storageclass -A`)" in pvc
    (ingress,) = hints("IngressNotConfigured", KUBECTL)
    assert f"`{NAMED}-n knative-serving get pods`, `{NAMED}-n istio-system get pods`" in ingress


@pytest.mark.parametrize("patterns", [p for p, hint in HINTS if "`kubectl " in hint])
def test_no_hint_gives_a_command_without_the_context(patterns):
    assert unnamed_commands("\n".join(hints(patterns[0], KUBECTL))) == []


def test_a_report_with_a_hint_names_the_context(fake: FakeKube) -> None:
    report = with_hints(["Warning: IngressNotConfigured"], KUBECTL)
    assert NAMED in report and unnamed_commands(report) == []


def test_only_commands_in_backticks_are_rebuilt():
    text = "run `kubectl get pods` (kubectl reads its kubeconfig)"
    assert naming_context(text, KUBECTL) == f"run `{NAMED}get pods` (kubectl reads its kubeconfig)"
