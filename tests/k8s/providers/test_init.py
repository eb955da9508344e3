"""k8s.providers: a provider by name, each of the right kind, the unknown ones named with
the valid ones."""

from __future__ import annotations

import pytest

from k8s.providers import PROVIDERS, provider
from k8s.providers.existing import Existing
from k8s.providers.lab import K3d, Kind, Minikube


def test_unknown_provider_is_named():
    with pytest.raises(ValueError, match="unknown cluster provider 'k8s'; valid: k3d, kind"):
        provider("k8s")


@pytest.mark.parametrize(("name", "kind"), [("k3d", K3d), ("kind", Kind), ("minikube", Minikube)])
def test_each_lab_provider_by_its_name_without_a_context(name, kind):
    made = provider(name, kube_context="ignored")  # the lab's clusters name their own
    assert type(made) is kind and made.name == name and PROVIDERS[name] is kind


def test_an_existing_cluster_keeps_its_context():
    made = provider("existing", kube_context="alice@byo")
    assert isinstance(made, Existing) and made.context == "alice@byo"
