"""ml.training.tf_config: TF_CONFIG parsing: one worker without it, the chief among the workers, and
each malformed TF_CONFIG explained."""

from __future__ import annotations

import json

import pytest

from ml.training.config import ConfigError
from ml.training.tf_config import parse_tf_config


def test_no_tf_config_is_one_worker() -> None:
    spec = parse_tf_config(None)
    assert spec.num_workers == 1 and spec.is_chief


def test_tf_config_worker_roles() -> None:
    cluster = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
    w0 = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    w1 = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    assert (w0.num_workers, w0.is_chief, w1.is_chief) == (2, True, False)
    with_chief = {"chief": ["c:1"], "worker": ["w:1"]}
    w = parse_tf_config(json.dumps({"cluster": with_chief, "task": {"type": "worker", "index": 0}}))
    assert not w.is_chief and w.num_workers == 2


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"task": {"type": "worker", "index": 0}}', "no 'cluster'"),
        ('{"cluster": {"worker": ["a:1"]}}', "no 'task'"),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
            "is not a role",
        ),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
            "out of range",
        ),
        (
            '{"cluster": {"worker": ["nohostport"]}, "task": {"type": "worker", "index": 0}}',
            "is not host:port",
        ),
    ],
    ids=[
        "not json",
        "not an object",
        "no cluster",
        "no task",
        "role missing",
        "index too big",
        "address without port",
    ],
)
def test_malformed_tf_config_is_explained(raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_tf_config(raw)
    assert message in str(err.value)
