"""A canary release's objects on a cluster (``invoke deploy --canary``).

The canary's own pod and Service are ``canary_pods.py``'s; the predictor pods forward its
share of their requests there (``ml/server/canary.py``). What the analysis needs besides
are three short Jobs on the volume, and an Event per decision on the InferenceService
(what ``kubectl describe inferenceservice`` shows):

- ``distml-canary-weight``: ``ml canary_weight``, the share (and the shadow's) and the
  canary pod's URL in ``weight.json``;
- ``distml-canary-end``: ``ml canary_publish --promote|--reject``, the analysis as text;
- ``distml-canary-sample``: ``ml sample_accuracy``, the held-out labelled sample sent to each
  version's own URL through the predictor's in-cluster Service.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Mapping
from typing import Any

from k8s.manifests import canary_pods
from k8s.manifests.names import labels, raw_data_dir
from k8s.manifests.pods import volume_job
from k8s.providers.settings import Resources, Settings
from ml.contract import canary_commands

WEIGHT_JOB = "distml-canary-weight"
END_JOB = "distml-canary-end"
SAMPLE_JOB = "distml-canary-sample"
COMPONENT = "canary"
# No CPU requested (an explicit 0: a limit alone would be taken as the request): a canary
# runs under load, when the predictors' peak may hold every CPU the node has to give, and
# a Job that waits Pending for the autoscaler's five-minute scale-in stalls the analysis.
# They run for seconds on what the node has spare, within their limits.
#: Writing a file and moving a folder: next to nothing.
FILE_RESOURCES = Resources("0", "500m", "64Mi", "256Mi")
#: SAMPLE_IMAGES images read and sent twice, in batches of 100 (numpy, no TensorFlow).
SAMPLE_RESOURCES = Resources("0", "1", "256Mi", "1Gi")
#: The Event's source, and the longest message kept (the API server's limit is 1 KiB).
REPORTER = "distml"
MESSAGE_LIMIT = 1024


def weight_job(s: Settings, weight: int, shadow: int = 0) -> dict[str, Any]:
    """The share in ``weight.json``, forwarded to the canary's own pod (canary_pods.py)."""
    command = canary_commands.canary_weight(
        s.mount_path, s.service, weight, url=canary_pods.url(s), shadow=shadow
    )
    return volume_job(s, WEIGHT_JOB, COMPONENT, command, FILE_RESOURCES)


def end_job(s: Settings, *, promote: bool, record_json: str) -> dict[str, Any]:
    command = canary_commands.canary_end(
        s.mount_path, s.service, promote=promote, record_json=record_json
    )
    return volume_job(s, END_JOB, COMPONENT, command, FILE_RESOURCES)


def sample_job(s: Settings, endpoints: Mapping[str, str]) -> dict[str, Any]:
    """Each endpoint's accuracy on the held-out sample, from the Fashion-MNIST files in the
    volume (``up --source-dir`` put them there; else ml.data.raw downloads them)."""
    command = canary_commands.sample_accuracy(endpoints, raw_data_dir(s))
    return volume_job(s, SAMPLE_JOB, COMPONENT, command, SAMPLE_RESOURCES)


def version_url(address: str, service: str, version: int) -> str:
    """A version's own V2 infer URL behind the predictor's in-cluster ``address``."""
    return f"{address.rstrip('/')}/v2/models/{service}/versions/{version}/infer"


def event(
    s: Settings, isvc: Mapping[str, Any], reason: str, message: str, *, warning: bool = False
) -> dict[str, Any]:
    """A core/v1 Event on the InferenceService ``isvc`` (as read from the cluster: its uid
    ties the Event to this object, not to a later one of the same name)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = isvc.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta.get('name', s.service)}.{secrets.token_hex(8)}",
            "namespace": s.namespace,
            "labels": labels(COMPONENT),
        },
        "involvedObject": {
            "apiVersion": isvc.get("apiVersion", "serving.kserve.io/v1beta1"),
            "kind": "InferenceService",
            "name": meta.get("name", s.service),
            "namespace": s.namespace,
            "uid": meta.get("uid", ""),
        },
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "type": "Warning" if warning else "Normal",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": REPORTER},
        "reportingComponent": REPORTER,
        "reportingInstance": REPORTER,
    }
