"""How the user's machine reaches the served model on a cluster distml did not create:
``loadtest --url`` when given; else the InferenceService's ``status.url`` when it answers
from here (the cluster's ingress, DNS for its domain); else a ``kubectl port-forward`` to
the predictor's Service (standard mode) or the Istio gateway (knative mode), said in one
line. The clusters distml makes map their ingress to a host port instead
(``Provider.ingress_url``)."""

from __future__ import annotations

import contextlib
import shlex
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlparse

from common.poll import Clock, Done, Failed
from runtime import tensorboard as http
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.cluster.tensorboard import PortForward

FORWARD_HOST = "127.0.0.1"
GATEWAY = ("istio-system", "istio-ingressgateway")  # net-istio's gateway (knative mode)
PREDICTOR_PORT = 80  # the port of KServe's `<isvc>-predictor` Service


@dataclass(frozen=True)
class Way:
    """Where to send requests, the Host header they need, and how it was found."""

    base: str
    host: str | None
    how: str


def ingress_host(serving_mode: str, isvc_url: str | None) -> str | None:
    """Knative routes on the Host header: the InferenceService's host."""
    return (urlparse(isvc_url or "").netloc or None) if serving_mode == "knative" else None


def model_answers(base: str, service: str) -> bool:
    """The KServe V1 model endpoint answers ``GET /v1/models/<service>`` with a success."""
    return http.answers(f"{base.rstrip('/')}/v1/models/{service}")


def forward_target(cx: ClusterContext, serving_mode: str, service: str) -> tuple[str, str]:
    """(namespace, svc/NAME) a port-forward reaches the predictors through."""
    if serving_mode == "knative":
        return GATEWAY[0], f"svc/{GATEWAY[1]}"
    return cx.namespace, f"svc/{service}-predictor"


@contextlib.contextmanager
def way_in(
    cx: ClusterContext, serving_mode: str, service: str, isvc_url: str | None, url: str | None
) -> Iterator[Way]:
    """The way to the model while the block runs (a port-forward is stopped after it)."""
    host = ingress_host(serving_mode, isvc_url)
    if url:
        yield Way(url.rstrip("/"), host, "--url")
        return
    if isvc_url and (cx.dry or model_answers(isvc_url, service)):
        yield Way(isvc_url.rstrip("/"), None, "the InferenceService's URL")
        return
    from runtime.procs import free_ports

    (port,) = free_ports(1, FORWARD_HOST)
    ns, target = forward_target(cx, serving_mode, service)
    command = cx.provider.kubectl(
        f"-n {shlex.quote(ns)} port-forward --address {FORWARD_HOST} {target} "
        f"{port}:{PREDICTOR_PORT}"
    )
    cx.out(
        f"note: {isvc_url or 'the InferenceService URL'} does not answer from this machine: "
        f"through `kubectl port-forward` to {ns}/{target} (one predictor pod gets the "
        "requests; give `--url` for the cluster's ingress)"
    )
    forward = PortForward(cx.c.run(command, asynchronous=True, hide=True, warn=True))
    base = f"http://{FORWARD_HOST}:{port}"
    try:
        if not cx.dry:
            _wait_listening(port, forward, command, cx.clock)
        yield Way(base, host, f"a port-forward to {ns}/{target}")
    finally:
        if not cx.dry:
            ended = forward.ended()
            if ended:  # during the block: the requests after it failed for this reason
                cx.out(f"note: the port-forward ended during the run ({ended})")
            forward.stop()


FORWARD_READY_S = 30.0


def _wait_listening(port: int, forward: PortForward, command: str, clock: Clock) -> None:
    """Until kubectl listens on ``port`` (it does once it can forward), or says why not."""

    def listening() -> bool:
        with socket.socket() as sock:
            sock.settimeout(1)
            return sock.connect_ex((FORWARD_HOST, port)) == 0

    verdict = http.wait_up(
        listening, forward.ended, timeout=FORWARD_READY_S, interval=0.5, clock=clock
    )
    if not isinstance(verdict, Done):
        why = (
            verdict.reason
            if isinstance(verdict, Failed)
            else f"not listening after {FORWARD_READY_S:.0f} s"
        )
        raise ClusterError(f"the port-forward did not start ({why}): `{command}`")
