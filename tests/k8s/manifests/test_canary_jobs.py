"""k8s.manifests.canary_jobs: the canary's three Jobs and its Events, each strictly valid
against the pinned Kubernetes schema; every Job's command parses with the CLI its pod runs,
and each is small enough to be scheduled beside a full set of predictors."""

from __future__ import annotations

import json

import pytest

from k8s.client.ownership import stamp
from k8s.manifests import canary_jobs as cj
from k8s.manifests.names import INSTANCE_LABEL, raw_data_dir
from k8s.providers.settings import quantity
from ml import contract
from ml.selection import canary_publish, canary_weight, sample_accuracy
from tests.support import k8s_schemas
from tests.support.manifests_kit import settings

ISVC = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "tf-mnist", "namespace": "kubeflow", "uid": "u-1"},
}


def command(job: dict) -> list[str]:
    (c,) = job["spec"]["template"]["spec"]["containers"]
    return c["command"]


def jobs() -> list[dict]:
    s = settings()
    urls = {
        "1": cj.version_url("http://tf-mnist-predictor.kubeflow.svc.cluster.local/", "tf-mnist", 1)
    }
    return [
        cj.weight_job(s, 10),
        cj.end_job(s, promote=False, record_json=json.dumps({"reason": "a 'quote' and \"more\""})),
        cj.sample_job(s, urls),
    ]


def test_every_object_is_valid_and_carries_the_instance_label_once_stamped():
    objs = [*jobs(), cj.event(settings(), ISVC, "CanaryAnalysis", "x" * 5000, warning=True)]
    for obj in objs:
        stamped = stamp(obj, "wd-1")  # what ClusterContext.apply and the Events do
        assert k8s_schemas.validate(stamped) == [], obj["kind"]
        assert stamped["metadata"]["labels"][INSTANCE_LABEL] == "wd-1"
        assert stamped["metadata"]["labels"]["app.kubernetes.io/part-of"] == "distml"


def test_each_job_runs_its_module_with_arguments_its_parser_takes():
    weight, end, sample = jobs()
    assert (
        canary_weight.build_parser().parse_args(contract.split_step(command(weight))[1]).weight
        == 10
    )
    args = canary_publish.build_parser().parse_args(contract.split_step(command(end))[1])
    assert args.reject and json.loads(args.record_json) == {"reason": "a 'quote' and \"more\""}
    parsed = sample_accuracy.parser().parse_args(contract.split_step(command(sample))[1])
    assert parsed.source_dir == raw_data_dir(settings())
    assert parsed.endpoint == [
        (
            "1",
            "http://tf-mnist-predictor.kubeflow.svc.cluster.local/v2/models/tf-mnist/versions/1/infer",
        )
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_job_asks_no_cpu_and_never_retries(index):
    # Scheduled beside the predictors' peak: a request, even a small one, can wait Pending.
    job = jobs()[index]
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert (
        quantity(c["resources"]["requests"]["cpu"]) == 0 < quantity(c["resources"]["limits"]["cpu"])
    )
    assert job["spec"]["backoffLimit"] == 0


def test_an_event_names_the_object_by_uid_and_keeps_within_the_limit():
    event = cj.event(settings(), ISVC, "CanaryPromoted", "y" * 2000)
    assert event["involvedObject"]["uid"] == "u-1" and event["type"] == "Normal"
    assert len(event["message"]) == cj.MESSAGE_LIMIT
    again = cj.event(settings(), ISVC, "CanaryPromoted", "y")
    assert again["metadata"]["name"] != event["metadata"]["name"], "each Event is new"
    assert event["metadata"]["name"].startswith("tf-mnist.")
