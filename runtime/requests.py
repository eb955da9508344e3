"""What a task asks a runtime to do: typed requests, validated once, with the messages
users see. ``tasks/`` builds them from flags and config; both runtimes take the same ones.

A field a runtime may not support names the capability it needs (``needs=`` in its
metadata, see ``runtime.api.Capabilities``); :func:`unsupported` lists the flags a user set
that the chosen runtime cannot honour, so the task can say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from common.errors import DistmlError
from k8s.manifests.argo_workflow import DEFAULT_CACHE_MAX_AGE, is_duration
from k8s.manifests.names import is_dns_subdomain
from k8s.providers.settings import PREDICTORS, SCALE_METRICS, SERVING_MODES
from ml import contract
from runtime.canary.policy import DEFAULT_STEPS, Policy

DEFAULT_CONCURRENCY = 5
DEFAULT_DURATION = "30s"
DEFAULT_HTTP_PORT = 8080


class RequestError(DistmlError):
    """A flag's value no runtime could act on; the message names the flag and the fix."""


def _needs(capability: str, flag: str, default: Any = None) -> Any:
    return field(default=default, metadata={"needs": capability, "flag": flag})


def _at_least(flag: str, value: int | float | None, low: int | float) -> None:
    if value is not None and value < low:
        raise RequestError(f"{flag} must be at least {low}, got {value}")


def _one_of(flag: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise RequestError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")


def _training(
    models: tuple[str, ...], profile: str, epochs: int | None, steps_per_epoch: int | None
) -> None:
    """The checks every request that trains makes: known models (at least one), a known
    profile, positive overrides."""
    unknown = [m for m in models if m not in contract.MODEL_TYPES]
    if unknown:
        raise RequestError(
            f"unknown model type {unknown[0]!r}; valid: {', '.join(contract.MODEL_TYPES)}"
        )
    if not models:
        raise RequestError(f"no model to train; valid: {', '.join(contract.MODEL_TYPES)}")
    if profile not in contract.PROFILES:
        raise RequestError(f"unknown profile {profile!r}; valid: {', '.join(contract.PROFILES)}")
    _at_least("--epochs", epochs, 1)
    _at_least("--steps-per-epoch", steps_per_epoch, 1)


def _port(flag: str, value: int) -> None:
    if not 1 <= value <= 65535:
        raise RequestError(f"{flag} must be a TCP port between 1 and 65535, got {value}")


def _check_url(url: str) -> None:
    """``loadtest --url``: an http(s) URL with a host, no query or fragment."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port out of range)
    except ValueError as e:
        raise RequestError(f"--url {url!r} is not a URL: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise RequestError(
            f"--url {url!r} must be the service's base URL: http(s)://HOST[:PORT][/PATH], "
            "no query (e.g. http://localhost:8080)"
        )


def _fraction(flag: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        hint = f" (did you mean {value / 100:g}?)" if value > 1 else ""
        raise RequestError(f"{flag} is a fraction between 0 and 1, got {value:g}{hint}")


def unsupported(request: Any, capabilities: Any) -> list[str]:
    """The flags set on ``request`` (away from their default) whose capability the runtime
    lacks, in field order."""
    flags = []
    for f in fields(request):
        needs = f.metadata.get("needs")
        if needs and getattr(request, f.name) != f.default and not getattr(capabilities, needs):
            flags.append(f.metadata["flag"])
    return flags


@dataclass(frozen=True)
class UpRequest:
    source_dir: str | None = None
    serving_mode: str | None = _needs("cluster", "--serving-mode")
    base: str | None = _needs("cluster", "--base")
    base_image: str | None = _needs("cluster", "--base-image")
    with_argo: bool = _needs("cluster", "--with-argo", False)
    with_monitoring: bool = _needs("cluster", "--with-monitoring", False)
    install_operators: bool = _needs("cluster", "--install-operators", False)
    storage_class: str | None = _needs("cluster", "--storage-class")

    def __post_init__(self) -> None:
        _one_of("--serving-mode", self.serving_mode, SERVING_MODES)
        if self.storage_class is not None and not is_dns_subdomain(self.storage_class):
            raise RequestError(
                f"--storage-class {self.storage_class!r} is not a StorageClass name "
                "(a-z, 0-9, '-', '.')"
            )


@dataclass(frozen=True)
class TrainRequest:
    models: tuple[str, ...] = contract.MODEL_TYPES
    workers: int = contract.DEFAULT_WORKERS
    parallel: int | None = None
    profile: str = contract.DEFAULT_PROFILE
    epochs: int | None = None
    steps_per_epoch: int | None = None
    max_restarts: int = contract.DEFAULT_MAX_RESTARTS
    gpus_per_worker: int = _needs("gpus", "--gpus-per-worker", 0)

    def __post_init__(self) -> None:
        _training(self.models, self.profile, self.epochs, self.steps_per_epoch)
        _at_least("--workers", self.workers, 1)
        _at_least("--parallel", self.parallel, 1)
        _at_least("--max-restarts", self.max_restarts, 0)
        _at_least("--gpus-per-worker", self.gpus_per_worker, 0)


@dataclass(frozen=True)
class DeployRequest:
    min_accuracy: float = 0.0
    force: bool = False
    predictor: str = _needs("predictors", "--predictor", "kserve")
    target: int | None = _needs("scales_out", "--target")
    min_replicas: int | None = _needs("scales_out", "--min-replicas")
    max_replicas: int | None = _needs("scales_out", "--max-replicas")
    container_concurrency: int | None = _needs("scales_out", "--container-concurrency")
    # Standard mode: what drives scaling (None: cpu). concurrency / rps need Prometheus and
    # KEDA (`up --with-monitoring`); without them the cluster runtime says so and uses cpu.
    scale_metric: str | None = _needs("scales_out", "--scale-metric")
    request_logger: bool = _needs("cluster", "--request-logger", False)
    http_port: int = _needs("local_port", "--http-port", DEFAULT_HTTP_PORT)
    # A canary release (runtime/canary): the new version takes these shares of the traffic
    # in turn, judged every interval; promoted after the last, or rolled back.
    canary: bool = _needs("canary", "--canary", False)
    canary_steps: tuple[int, ...] = DEFAULT_STEPS
    canary_interval: float = 30.0
    canary_failure_limit: int = 0
    # The shadow phase before the first step (local runtime): mirrored copies, no user.
    canary_shadow: bool = True
    canary_shadow_interval: float = 30.0

    def __post_init__(self) -> None:
        self._check_canary()
        _one_of("--predictor", self.predictor, PREDICTORS)
        _one_of("--scale-metric", self.scale_metric, SCALE_METRICS)
        _fraction("--min-accuracy", self.min_accuracy)
        for flag, value in (
            ("--target", self.target),
            ("--min-replicas", self.min_replicas),
            ("--max-replicas", self.max_replicas),
            ("--container-concurrency", self.container_concurrency),
        ):
            _at_least(flag, value, 0 if flag == "--min-replicas" else 1)
        _port("--http-port", self.http_port)

    def _check_canary(self) -> None:
        tuned = [
            flag
            for name, flag in (
                ("canary_steps", "--canary-steps"),
                ("canary_interval", "--canary-interval"),
                ("canary_failure_limit", "--canary-failure-limit"),
                ("canary_shadow", "--no-shadow"),
                ("canary_shadow_interval", "--shadow-interval"),
            )
            if getattr(self, name) != getattr(DeployRequest, name)
        ]
        if tuned and not self.canary:
            raise RequestError(f"{tuned[0]} tunes a canary release: add --canary")
        if not self.canary_shadow_interval > 0:
            raise RequestError(
                f"--shadow-interval must be > 0 s, not {self.canary_shadow_interval:g} "
                "(--no-shadow skips the shadow phase)"
            )
        try:
            self.canary_policy()
        except ValueError as e:
            flags = "--canary-steps/--canary-interval/--canary-failure-limit"
            raise RequestError(f"{flags}: {e}") from None

    def canary_policy(self) -> Policy:
        return Policy(
            steps=self.canary_steps,
            interval_s=self.canary_interval,
            failure_limit=self.canary_failure_limit,
            shadow_interval_s=self.canary_shadow_interval if self.canary_shadow else None,
        )


@dataclass(frozen=True)
class LoadtestRequest:
    concurrency: int = DEFAULT_CONCURRENCY
    duration: str = DEFAULT_DURATION
    spawn_rate: float | None = None
    max_failure_ratio: float = 0.0
    expect_scale_out: bool = True
    url: str | None = _needs("cluster", "--url")  # the service's base URL, as the user reaches it

    def __post_init__(self) -> None:
        from loadtest.plan import check_flags

        if self.url is not None:
            _check_url(self.url)

        try:
            check_flags(self.concurrency, self.duration, self.max_failure_ratio)
        except ValueError as e:
            raise RequestError(str(e)) from e
        if self.spawn_rate is not None and self.spawn_rate <= 0:
            raise RequestError(f"--spawn-rate must be above 0, got {self.spawn_rate:g}")


@dataclass(frozen=True)
class DownRequest:
    purge: bool = False
    keep_cluster: bool = _needs("cluster", "--keep-cluster", False)


@dataclass(frozen=True)
class TensorboardRequest:
    """``invoke tensorboard``: TensorBoard over the volume's training runs, reached on
    127.0.0.1:``port`` until Ctrl-C."""

    port: int = contract.TENSORBOARD_PORT

    def __post_init__(self) -> None:
        _port("--port", self.port)


@dataclass(frozen=True)
class WorkflowRequest:
    """``invoke workflow``: submit the whole pipeline as one Argo Workflow (and ``watch``
    it), or ``stop`` distml's running workflows."""

    models: tuple[str, ...] = contract.MODEL_TYPES
    profile: str = contract.DEFAULT_PROFILE
    watch: bool = False
    stop: bool = False
    epochs: int | None = None
    steps_per_epoch: int | None = None
    min_accuracy: float = 0.0
    cache_max_age: str = DEFAULT_CACHE_MAX_AGE
    # The selection step publishes a canary release, judged from here once the Workflow
    # ends (`deploy --canary`'s analysis), instead of serving it.
    canary: bool = False
    canary_steps: tuple[int, ...] = DeployRequest.canary_steps
    canary_interval: float = DeployRequest.canary_interval
    canary_failure_limit: int = DeployRequest.canary_failure_limit

    def __post_init__(self) -> None:
        _fraction("--min-accuracy", self.min_accuracy)
        self.canary_request()  # the canary flags checked as deploy checks them
        if self.canary and not self.watch:
            raise RequestError(
                "--canary judges the new version from this machine once the Workflow ends: "
                "add --watch"
            )
        if not is_duration(self.cache_max_age):
            raise RequestError(
                f"--cache-max-age must be a duration such as 720h, 30m or 90s, got "
                f"{self.cache_max_age!r}"
            )
        if self.stop and self.watch:
            raise RequestError(
                "--stop deletes the running workflows; --watch follows a new one: use one"
            )
        _training(self.models, self.profile, self.epochs, self.steps_per_epoch)

    def canary_request(self) -> DeployRequest:
        """The canary release the Workflow ends with, as `deploy --canary` takes it."""
        return DeployRequest(
            canary=self.canary,
            canary_steps=self.canary_steps,
            canary_interval=self.canary_interval,
            canary_failure_limit=self.canary_failure_limit,
        )
