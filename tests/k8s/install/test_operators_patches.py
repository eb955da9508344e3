"""k8s.install.operators: the `kubectl patch` calls `up` makes right after an install go through
the same retry as its applies: a webhook installed a moment ago may not answer yet (a
transient error), and a patch refused for good still fails at once."""

from __future__ import annotations

import pytest
from invoke import Config, MockContext, Result

from k8s.install import operators
from k8s.install.operators import Installer
from k8s.providers import provider as make_provider
from k8s.providers.settings import Settings
from k8s.waits.cluster_poll import WaitError
from tests.support.fakekube import FakeClock, FakeKube

WEBHOOK_DOWN = (
    "Error from server (InternalError): Internal error occurred: failed calling webhook "
    '"config.webhook.serving.knative.dev": failed to call webhook: Post '
    '"https://webhook.knative-serving.svc:443/config-validation?timeout=10s": dial tcp '
    "10.96.0.12:443: connect: connection refused"
)
DENIED = (
    'Error from server (BadRequest): admission webhook "config.webhook.serving.knative.dev" '
    "denied the request: validation failed: invalid value"
)
PATCH = "kubectl --context kind-dist-ml -n knative-serving patch configmap config-domain"


def installer(results: list[Result], timeout: float = 600.0) -> tuple[Installer, list[str]]:
    calls: list[str] = []
    ctx = MockContext(config=Config(overrides={"run": {"dry": False}}))
    answers = iter(results)

    def run(command: str, **kwargs) -> Result:
        calls.append(command)
        return next(answers)

    ctx.run = run  # type: ignore[method-assign]
    fake = FakeKube(FakeClock())
    settings = Settings(provider="kind", image="distml:t", serving_mode="knative")
    inst = Installer(ctx, fake, make_provider("kind"), settings, lambda _: None, fake.clock)
    inst.timeout = timeout
    return inst, calls


def test_a_patch_refused_by_a_webhook_not_ready_yet_is_retried_until_it_passes():
    inst, calls = installer(
        [Result(stderr=WEBHOOK_DOWN, exited=1), Result(stderr=WEBHOOK_DOWN, exited=1), Result()]
    )
    inst.configmap("knative-serving", "config-domain", {"example.com": ""})
    assert len(calls) == 3 and all(c.startswith(PATCH) for c in calls)


def test_a_patch_refused_for_good_fails_at_once():
    inst, calls = installer([Result(stderr=DENIED, exited=1)])
    with pytest.raises(operators.PermanentError, match="denied the request"):
        inst.configmap("knative-serving", "config-domain", {"example.com": ""})
    assert len(calls) == 1


def test_a_webhook_that_never_answers_fails_at_the_deadline_with_its_message():
    inst, calls = installer([Result(stderr=WEBHOOK_DOWN, exited=1)] * 1000, timeout=30)
    with pytest.raises(WaitError, match="gave up on configuring knative-serving/config-domain"):
        inst.configmap("knative-serving", "config-domain", {"example.com": ""})
    assert 1 < len(calls) < 1000
