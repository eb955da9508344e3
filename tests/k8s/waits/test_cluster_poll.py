"""k8s.waits.cluster_poll.retry on a fake clock: an API error that passes (a webhook not ready yet)
is retried, one that lasts gives up at the deadline with the last error, and any other
error is not swallowed."""

from __future__ import annotations

import pytest

from common.poll import Failed
from k8s.client.kube import KubeError
from k8s.waits.cluster_poll import WaitError, outcome, retry
from tests.support.fakekube import FakeKube
from tests.support.wait_kit import KUBECTL, NAMED, NS, TF, collect, unnamed_commands


def test_retry_succeeds_after_two_webhook_errors(fake: FakeKube) -> None:
    tfjob = {"apiVersion": TF, "kind": "TFJob", "metadata": {"name": "cnn", "namespace": NS}}
    webhook = KubeError(
        "apply (dry run) TFJob kubeflow/cnn failed: Internal error occurred: failed calling "
        'webhook "validator.tfjob.training-operator.kubeflow.org": dial tcp 10.43.0.9:443: '
        "connect: connection refused"
    )
    fake.fail("apply", webhook, times=2)
    lines, out = collect()

    result = retry(
        lambda: fake.apply(tfjob, dry_run=True),
        what="training-operator webhook",
        timeout=60,
        clock=fake.clock,
        out=out,
        kubectl=KUBECTL,
    )

    assert result == tfjob
    assert len(lines) == 2
    assert lines[0].startswith("training-operator webhook: not ready yet (apply (dry run) TFJob")
    assert "retry 1 in 2s" in lines[0] and "retry 2 in 2s" in lines[1]
    assert fake.clock.now == 4
    assert fake.dry_runs == [tfjob] and fake.applied == []


def test_retry_gives_up_at_the_deadline_with_the_last_error(fake: FakeKube) -> None:
    calls = []

    def apply() -> None:
        calls.append(fake.clock.now)
        raise KubeError(f"x509: certificate signed by unknown authority (call {len(calls)})")

    with pytest.raises(WaitError) as info:
        retry(
            apply,
            what="cert-manager webhook",
            timeout=10,
            clock=fake.clock,
            out=lambda _: 0,
            kubectl=KUBECTL,
        )

    assert "gave up on cert-manager webhook after 10s and 6 attempts" in str(info.value)
    assert "last error: x509: certificate signed by unknown authority (call 6)" in str(info.value)
    assert f"(`{NAMED}get pods -A`)" in info.value.next_step
    assert unnamed_commands(str(info.value)) == []
    assert calls == [0, 2, 4, 6, 8, 10]
    assert isinstance(info.value.__cause__, KubeError)


def test_retry_does_not_swallow_other_errors(fake: FakeKube) -> None:
    def broken() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        retry(broken, what="x", timeout=60, clock=fake.clock, out=print, kubectl=KUBECTL)
    assert fake.clock.now == 0


def test_a_wait_that_gave_up_on_the_api_names_the_context_to_check_it_with():
    with pytest.raises(WaitError) as info:
        outcome(Failed("the API kept failing"), "x", lambda v: WaitError("t"), kubectl=KUBECTL)
    assert f"(`{NAMED}get nodes`)" in info.value.next_step
    assert unnamed_commands(str(info.value)) == []
