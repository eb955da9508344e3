"""``python -m integration.alert_fault``: a deliberate fault makes its alert fire within its
``for:`` and clear after the fault ends, on the run's real Prometheus with distml's rules.

The fault: every predictor server of the run's cluster stopped with SIGSTOP, from this
machine (a kind node's processes are this machine's: a container's PID 1 ignores a
SIGSTOP sent from inside it). Their scrapes time out, ``up`` turns 0, and
``DistmlPredictorDown`` (every pod of the service down, ``for: 2m``) must turn firing
within its ``for:`` plus a few evaluations; then SIGCONT (always, whatever happened), and
it must be gone within a few scrapes. Waited for as conditions with deadlines, not sleeps.

A second fault: every predictor pod gone. The nodes cordoned and the predictor pods
deleted, their replacements stay Pending (no IP: no pod target is left to fail its
scrape); only the predictor Service's probe (``k8s.monitoring.stack``) is there, 0, and
``DistmlPredictorDown`` must fire within its ``for:`` as before; then the nodes uncordoned
(always), and it must clear once a pod is Ready again (:data:`GONE_CLEAR_TIMEOUT_S`: a new
predictor loads TensorFlow and its model first).

Notifications: the run's ``up`` named ``integration.alert_sink``'s URL as
``cluster.alert_webhook``; the sink is started before the fault, and Alertmanager must
deliver the alert to it firing (within its group wait after the alert fires; the fault
holds until then, since an alert that clears within the group wait is never notified) and
resolved (within a group interval after it clears), with the service's labels.
Run by ``nox -s integration -- ... --with-monitoring`` after the dashboard's check.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from integration import alert_sink
from integration.kind_run import NAMESPACE, context
from k8s.client.kube import Kube
from k8s.monitoring import prometheus
from ml import contract
from ml.contract import DEFAULT_SERVICE

ALERT = "DistmlPredictorDown"
FOR_S = 120  # the rule's `for:` (k8s/monitoring/rules.py)
#: How late past its `for:` the alert may turn firing: a scrape's timeout, and a few of
#: the 5 s evaluations the rule's pending state needs to be seen.
FIRE_SLACK_S = 60
CLEAR_TIMEOUT_S = 90
GONE_CLEAR_TIMEOUT_S = 300
#: Alertmanager's group wait (10 s) or group interval (1 m), and its webhook's retries.
NOTIFY_TIMEOUT_S = 120
#: A predictor's command names the model directory KServe mounts (ml/contract/__init__.py serve).
PREDICTOR_MARKS = (contract.step_mark("serve"), "/mnt/models")


def predictor_pids(proc: Path = Path("/proc")) -> list[int]:
    """This machine's processes that are predictor servers (their command line says so)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        # Any process's arguments, not only UTF-8 ones (the marks are ASCII).
        cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
        if all(mark in cmdline for mark in PREDICTOR_MARKS):
            found.append(int(entry.name))
    return sorted(found)


def _firing(kube: Kube, ref: prometheus.PrometheusRef, namespace: str, service: str) -> bool:
    return any(
        a.name == ALERT
        and a.firing
        and a.labels.get("namespace") == namespace
        and a.labels.get("isvc") == service
        for a in prometheus.alerts(kube, ref)
    )


def _until(what: str, condition: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``condition()`` holds; DistmlError at the deadline."""
    started = time.monotonic()
    verdict = poll(
        condition,
        lambda held: Done() if held else Pending(what),
        timeout=timeout,
        interval=2.0,
        retry_on=(DistmlError,),
    )
    if not isinstance(verdict, Done):
        raise DistmlError(f"{what}: not within {timeout:.0f} s")
    return time.monotonic() - started


def _never() -> float:
    return 0.0


def run(
    kube: Kube,
    ref: prometheus.PrometheusRef,
    namespace: str,
    service: str,
    while_firing: Callable[[], float] = _never,
) -> str:
    """The fault: stopped until the alert fires and ``while_firing()`` returns (the firing
    notification's wait: an alert that clears within Alertmanager's group wait is never
    notified at all, firing or resolved), then let go until it clears."""
    pids = predictor_pids()
    if not pids:
        raise DistmlError("no predictor server process on this machine (is the service up?)")
    if _firing(kube, ref, namespace, service):
        raise DistmlError(f"{ALERT} already fires before the fault: nothing would be shown")
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        fired = _until(f"{ALERT} firing", lambda: _firing(kube, ref, namespace, service),
                       FOR_S + FIRE_SLACK_S)  # fmt: skip
        while_firing()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    cleared = _until(f"{ALERT} gone", lambda: not _firing(kube, ref, namespace, service),
                     CLEAR_TIMEOUT_S)  # fmt: skip
    return (
        f"alert fault: {len(pids)} predictor server(s) stopped; {ALERT} fired after "
        f"{fired:.0f} s (for: {FOR_S} s) and was gone {cleared:.0f} s after they went on"
    )


def _kubectl(kube_context: str, *args: str) -> str:
    done = subprocess.run(
        ["kubectl", "--context", kube_context, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise DistmlError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def gone(kube_context: str, kube: Kube, ref: prometheus.PrometheusRef, namespace: str,
         service: str) -> str:  # fmt: skip
    """Every predictor pod gone: the nodes cordoned, the pods deleted (their replacements
    Pending) until the alert fires; then uncordoned until it clears."""
    from k8s.manifests.names import ISVC_POD_LABEL

    if _firing(kube, ref, namespace, service):
        raise DistmlError(f"{ALERT} already fires before the fault: nothing would be shown")
    nodes = _kubectl(kube_context, "get", "nodes", "-o", "name").split()
    selector = f"{ISVC_POD_LABEL}={service}"
    try:
        for node in nodes:
            _kubectl(kube_context, "cordon", node)
        _kubectl(kube_context, "-n", namespace, "delete", "pods", "-l", selector, "--wait=false")
        firing = lambda: _firing(kube, ref, namespace, service)  # noqa: E731
        fired = _until(f"{ALERT} firing with every pod Pending", firing, FOR_S + FIRE_SLACK_S)
    finally:
        for node in nodes:
            _kubectl(kube_context, "uncordon", node)
    back = lambda: not _firing(kube, ref, namespace, service)  # noqa: E731
    cleared = _until(f"{ALERT} gone once a pod is back", back, GONE_CLEAR_TIMEOUT_S)
    return (
        f"alert fault: every predictor pod gone (nodes cordoned, pods Pending); {ALERT} fired "
        f"after {fired:.0f} s (for: {FOR_S} s) and was gone {cleared:.0f} s after uncordon"
    )


def delivered(read: Callable[[], list[alert_sink.Notification]], status: str,
              namespace: str, service: str) -> bool:  # fmt: skip
    """The sink has had ``ALERT`` about the service with ``status`` (firing, resolved)."""
    return any(
        n.status == status and ALERT in n.names(namespace=namespace, isvc=service) for n in read()
    )


def notification(kube_context: str, namespace: str, service: str, status: str) -> float:
    """Seconds until the sink had ``ALERT`` with ``status``; DistmlError after
    :data:`NOTIFY_TIMEOUT_S`."""

    def read() -> list[alert_sink.Notification]:
        return alert_sink.notifications(kube_context, namespace)

    def arrived() -> bool:
        return delivered(read, status, namespace, service)

    return _until(f"{ALERT} {status} at the webhook", arrived, NOTIFY_TIMEOUT_S)


def main(argv: Sequence[str] | None = None) -> int:
    from k8s.client.kube import ApiKube
    from k8s.providers.settings import Settings

    p = argparse.ArgumentParser(prog="python -m integration.alert_fault", description=__doc__)
    p.add_argument("--context", default=context())
    p.add_argument("--namespace", default=NAMESPACE)
    p.add_argument("--service", default=DEFAULT_SERVICE)
    args = p.parse_args(argv)
    ref = prometheus.ref(Settings(image="-", namespace=args.namespace, with_monitoring=True))
    assert ref is not None
    try:
        alert_sink.start(args.context, args.namespace)
        sink = (args.context, args.namespace, args.service)

        waits: list[float] = []

        def firing() -> float:  # while the fault holds
            waits.append(notification(*sink, "firing"))
            return waits[-1]

        print(run(ApiKube(args.context), ref, args.namespace, args.service, firing))
        waits.append(notification(*sink, "resolved"))
        print(
            f"webhook {alert_sink.url(args.namespace)}: {ALERT} reached it firing "
            f"{waits[0]:.0f} s after it fired (the fault held meanwhile) and resolved "
            f"{waits[1]:.0f} s after it cleared"
        )
        print(gone(args.context, ApiKube(args.context), ref, args.namespace, args.service))
    except (DistmlError, RuntimeError) as e:
        print(f"alert fault: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        alert_sink.stop(args.context, args.namespace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
