"""ml.contract's volume lock: what serialises publishing (ml.selection.select) and a local deploy or
rollback (runtime.local.serving), held across processes, and gone with its holder."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ml import contract
from ml.contract.volume_lock import LockHeld, volume_lock

REPO = Path(__file__).resolve().parents[3]
HOLD = (
    "import sys, time\n"
    "from ml.contract.volume_lock import volume_lock\n"
    "with volume_lock(sys.argv[1], 'holder-under-test', wait_s=5, on_wait=print):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.read()\n"  # until the test closes stdin, or kills this process
)


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock at ``tmp_path/.x.lock``; yields (path, process)."""
    path = tmp_path / "serving" / ".tf-mnist.publish.lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    yield path, proc
    proc.kill()
    proc.wait()


def test_a_held_lock_says_who_holds_it_then_gives_up_at_the_deadline(holder):
    path, proc = holder
    told = []
    with (
        pytest.raises(LockHeld) as e,
        volume_lock(path, "second", wait_s=0.6, on_wait=told.append),
    ):
        pytest.fail("the lock was taken while another process held it")
    assert len(told) == 1 and f"holder-under-test (pid {proc.pid} on " in told[0]
    assert e.value.holder == told[0] and e.value.waited >= 0.6


def test_the_lock_is_taken_as_soon_as_its_holder_ends(holder):
    path, proc = holder
    proc.stdin.close()
    told = []
    with volume_lock(path, "second", wait_s=30, on_wait=told.append):
        assert "second (pid" in path.read_text()
    assert proc.wait(timeout=10) == 0


def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(holder):
    path, proc = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with volume_lock(path, "after the kill", wait_s=0, on_wait=pytest.fail):
        pass


@pytest.mark.parametrize(
    "name", ["tf-mnist", "a", "model-2", "a" * 63], ids=lambda n: f"valid {n[:12]}"
)
def test_service_names_that_are_dns_labels_are_accepted(name):
    assert contract.check_service(name) == name


@pytest.mark.parametrize(
    "name",
    ["../../../x", "", "TF-MNIST", "-x", "x-", "2model", "a.b", "a/b", "a" * 64, "tf_mnist"],
)
def test_service_names_that_are_no_dns_label_are_refused_with_what_one_looks_like(name):
    with pytest.raises(ValueError, match="not valid: use at most 63 lowercase letters"):
        contract.check_service(name)
