"""The one TFJob the training-operator recovery tests submit, and how to read it back from
the in-memory cluster."""

from __future__ import annotations

from k8s.client.objects import TFJOB_API
from tests.support.fakekube import FakeKube

NS = "kubeflow"
JOB = "train-cnn"


def job(fake: FakeKube) -> dict:
    return fake.obj(TFJOB_API, "TFJob", JOB, NS)
