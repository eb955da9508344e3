"""runtime/requests.py: every request checks its values once, naming the flag, before anything
starts; the flags a runtime cannot honour are named from its capabilities."""

from __future__ import annotations

import re

import pytest

from runtime.local import LocalRuntime
from runtime.requests import (
    DeployRequest,
    DownRequest,
    LoadtestRequest,
    RequestError,
    TensorboardRequest,
    TrainRequest,
    UpRequest,
    WorkflowRequest,
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"models": ("vgg",)}, "unknown model type 'vgg'; valid: cnn, cnn_dropout, cnn_batchnorm"),
        ({"workers": 0}, "--workers must be at least 1, got 0"),
        ({"parallel": 0}, "--parallel must be at least 1"),
        ({"max_restarts": -1}, "--max-restarts must be at least 0"),
        ({"epochs": 0}, "--epochs must be at least 1"),
        ({"profile": "huge"}, "unknown profile 'huge'; valid: quick, full"),
        ({"models": ()}, "no model to train"),
    ],
    ids=[
        "unknown model",
        "zero workers",
        "zero parallel",
        "negative restarts",
        "zero epochs",
        "unknown profile",
        "no model",
    ],
)
def test_train_arguments_are_validated_before_anything_starts(kwargs, message):
    with pytest.raises(RequestError) as err:
        TrainRequest(**kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (
            DeployRequest,
            {"min_accuracy": 86},
            "fraction between 0 and 1, got 86 (did you mean 0.86?)",
        ),
        (DeployRequest, {"predictor": "onnx"}, "--predictor must be one of kserve, tfserving"),
        (DeployRequest, {"http_port": 70000}, "--http-port must be a TCP port between 1 and"),
        (TensorboardRequest, {"port": 0}, "--port must be a TCP port between 1 and 65535, got 0"),
        (DeployRequest, {"min_replicas": -1}, "--min-replicas must be at least 0"),
        (LoadtestRequest, {"concurrency": 0}, "--concurrency must be at least 1"),
        (LoadtestRequest, {"duration": "soon"}, "--duration"),
        (LoadtestRequest, {"spawn_rate": 0}, "--spawn-rate must be above 0"),
        (UpRequest, {"serving_mode": "mesh"}, "--serving-mode must be one of knative, standard"),
        (WorkflowRequest, {"models": ("vgg",)}, "unknown model type 'vgg'"),
        (WorkflowRequest, {"profile": "huge"}, "unknown profile 'huge'; valid: quick, full"),
        (WorkflowRequest, {"steps_per_epoch": 0}, "--steps-per-epoch must be at least 1"),
        (WorkflowRequest, {"stop": True, "watch": True}, "--stop deletes the running workflows"),
        (WorkflowRequest, {"canary": True}, "--canary judges the new version from this machine"),
        (WorkflowRequest, {"canary_steps": (20,)}, "--canary-steps tunes a canary release"),
        (
            WorkflowRequest,
            {"canary": True, "watch": True, "canary_interval": 0},
            "--canary-steps/--canary-interval/--canary-failure-limit:",
        ),
        (
            DeployRequest,
            {"canary": True, "canary_shadow_interval": 0},
            "--shadow-interval must be > 0 s, not 0 (--no-shadow skips the shadow phase)",
        ),
        (DeployRequest, {"canary_shadow": False}, "--no-shadow tunes a canary release"),
    ],
    ids=[
        "percentage",
        "predictor",
        "port",
        "tensorboard port",
        "replicas",
        "concurrency",
        "duration",
        "spawn",
        "serving mode",
        "workflow model",
        "workflow profile",
        "workflow steps",
        "stop and watch",
        "canary without watch",
        "workflow canary flag without --canary",
        "workflow canary interval",
        "shadow interval",
        "no shadow without --canary",
    ],
)
def test_every_request_is_checked_once_with_the_flag_named(cls, kwargs, message):
    with pytest.raises(RequestError, match=re.escape(message)):
        cls(**kwargs)


def test_flags_a_runtime_cannot_honour_are_named_from_its_capabilities():
    from runtime.api import Capabilities
    from runtime.requests import unsupported

    local = LocalRuntime.capabilities
    deploy = DeployRequest(target=2, request_logger=True, http_port=9000)
    assert unsupported(deploy, local) == ["--target", "--request-logger"]
    assert unsupported(deploy, Capabilities(cluster=True, scales_out=True)) == ["--http-port"]
    assert unsupported(TrainRequest(gpus_per_worker=1), local) == ["--gpus-per-worker"]
    assert unsupported(DownRequest(keep_cluster=True), local) == ["--keep-cluster"]
    assert unsupported(DeployRequest(), local) == []  # defaults are never "set"
