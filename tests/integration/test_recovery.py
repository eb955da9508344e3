"""The recovery check's pieces that need no cluster: reading progress, naming the fault."""

from __future__ import annotations

import ast
import json

from hypothesis import given
from hypothesis import strategies as st

from integration import recovery
from ml.contract import PROGRESS_PREFIX


def _line(event: dict) -> str:
    return PROGRESS_PREFIX + json.dumps(event)


def test_progress_reads_the_trainers_events_and_skips_everything_else():
    log = "\n".join(
        [
            "2026-12-02 tensorflow noise",
            _line({"event": "epoch", "epoch": 1}),
            PROGRESS_PREFIX + '{"event": "resu',  # cut by the container's end
            _line({"event": "resumed", "epoch": 1, "step": 37}),
        ]
    )
    assert recovery.progress(log) == [
        {"event": "epoch", "epoch": 1},
        {"event": "resumed", "epoch": 1, "step": 37},
    ]


@given(st.lists(st.tuples(st.booleans(), st.text())))
def test_progress_never_raises_and_returns_only_events(lines):
    log = "\n".join((PROGRESS_PREFIX if tagged else "") + text for tagged, text in lines)
    assert all(isinstance(e, dict) for e in recovery.progress(log))


def test_the_faults_are_a_pod_deletion_and_a_sigterm_to_the_workers_process():
    assert recovery.fault_argv("delete-pod", "train-cnn-worker-1") == [
        "delete",
        "pod",
        "train-cnn-worker-1",
        "--wait=false",
    ]
    argv = recovery.fault_argv("sigterm", "p")
    assert argv[:5] == ["exec", "p", "--", "python", "-c"]
    # The snippet is exactly one os.kill(1, signal.SIGTERM), after its imports.
    body = ast.parse(argv[5]).body
    assert [type(n) for n in body] == [ast.Import, ast.Expr]
    assert ast.unparse(body[1]) == "os.kill(1, signal.SIGTERM)"


def test_the_worker_runs_python_as_pid_1_so_sigterm_reaches_the_trainer():
    """No shell or init in between: a shell as PID 1 would ignore the SIGTERM."""
    from k8s import manifests
    from k8s.providers.settings import Settings

    pod = manifests.tfjob(Settings(image="distml:x"), "cnn")["spec"]["tfReplicaSpecs"]["Worker"]
    (container,) = pod["template"]["spec"]["containers"]
    assert container["command"][:4] == ["python", "-m", "ml", "train"]
