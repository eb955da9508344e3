"""k8s.diagnose against tests/support/fakekube.py: a failed TFJob's report finds its pods by
the training operator's label and by the old ``job-name`` one, and leaves out a batch Job's
pod of the same name. (The reports as the waits print them are held in test_tfjobs.py,
test_workload_waits.py and test_isvc_wait.py.)"""

from __future__ import annotations

from k8s.diagnose import tfjob_failure_report
from tests.support.fakekube import FakeKube
from tests.support.wait_kit import NS, TF, tfjob_status


def test_tfjob_pods_also_found_by_the_old_job_name_label(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", "Failed"))
    fake.add_pod(NS, "cnn-worker-0", {"job-name": "cnn"}, phase="Failed", exit_code=1)
    fake.add_pod(NS, "cnn-copy", {"job-name": "cnn"}, owner_kind="Job")  # a batch Job's pod
    report = tfjob_failure_report(fake, NS, "cnn")
    assert "pod cnn-worker-0: Failed" in report
    assert "cnn-copy" not in report
