"""Istio's ingress gateway when `up --install-operators` installs Istio on a cluster distml
did not create.

The pinned install file makes the gateway Service ``istio-system/istio-ingressgateway`` of
type LoadBalancer: on a cloud, a billed load balancer reachable from the internet, in front
of a model server that has no authentication. There distml makes it a ClusterIP (reached
from this machine through a port-forward: ``runtime/cluster/reach.py``) unless
``cluster.istio_gateway_type`` asks for another type (``k8s.providers.settings.gateway_type``), and
says which before installing. The file is applied from a copy with only that field
changed, so no load balancer exists even for the moment before a patch.
"""

from __future__ import annotations

from typing import Any

import yaml

from k8s.install.upstream_files import UpstreamError
from k8s.providers.settings import GATEWAY_SETTING, GATEWAY_TYPES

GATEWAY = ("istio-system", "istio-ingressgateway")  # (namespace, name) of its Service
# What each type of the gateway Service means on a cluster distml did not create.
MEANS = {
    "ClusterIP": "reached from this machine through a port-forward, from nowhere else",
    "NodePort": "open on a port of every node's address, to whoever reaches the nodes",
    "LoadBalancer": "on a cloud, a billed load balancer reachable from the internet, in "
    "front of a model server that has no authentication",
}


def notice(service_type: str) -> str:
    """The line `up` says before installing Istio: what the gateway will be, and how to
    choose (a warning for a LoadBalancer, which only the setting asks for)."""
    ns, name = GATEWAY
    released = "" if service_type == "LoadBalancer" else " (not a LoadBalancer, as released)"
    return (
        f"{'warning' if service_type == 'LoadBalancer' else 'note'}: Istio's ingress gateway "
        f"Service {ns}/{name} is made {service_type}{released}: {MEANS[service_type]}; "
        f"{GATEWAY_SETTING} chooses ({', '.join(GATEWAY_TYPES)})"
    )


def _is_gateway(obj: dict[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return obj.get("kind") == "Service" and (meta.get("namespace"), meta.get("name")) == GATEWAY


def typed(text: str, service_type: str) -> str:
    """Istio's install file (``text``) with its gateway Service of type ``service_type``,
    every other object as it is. A file without exactly one such Service is not the one
    pinned: an error, never an install that leaves the gateway as released."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = [d for d in yaml.load_all(text, Loader=loader) if d]
    services = [d for d in docs if _is_gateway(d)]
    if len(services) != 1:
        raise UpstreamError(
            f"the Istio install file holds {len(services)} Service {'/'.join(GATEWAY)}, not one"
        )
    services[0]["spec"]["type"] = service_type
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump_all(docs, Dumper=dumper, sort_keys=False)
