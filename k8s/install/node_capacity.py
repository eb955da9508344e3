"""How many TFJobs fit at once on a cluster of several nodes, from what it says now.

On a cluster distml made (one node) ``k8s.install.capacity`` adds up the pinned stack. On any
other cluster the figures come live: each schedulable node's allocatable CPU and memory
minus the requests of the pods already on it. A TFJob fits only when *each* of its
workers fits on some node (the sum over nodes is not enough): with a ReadWriteOnce volume
all of them, and every job's, on the one node the volume is on; with ReadWriteMany each
worker where there is room.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from k8s.install.capacity import Need, node_allocatable

# Taints that keep our pods (which tolerate none) off a node.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
DONE_PHASES = ("Succeeded", "Failed")


def schedulable(node: dict[str, Any]) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    return not any(t.get("effect") in BLOCKING_EFFECTS for t in spec.get("taints") or [])


def pod_requests(pod: dict[str, Any]) -> Need:
    """What the scheduler counts for a pod: its containers' requests added up, or its
    largest init container's when that is more (per resource), plus its overhead."""
    spec = pod.get("spec") or {}

    def need(c: dict[str, Any]) -> Need:
        return Need.of((c.get("resources") or {}).get("requests"))

    total = sum((need(c) for c in spec.get("containers") or []), Need())
    for init in spec.get("initContainers") or []:
        one = need(init)
        total = Need(max(total.cpu_m, one.cpu_m), max(total.memory_mi, one.memory_mi))
    return total + Need.of(spec.get("overhead"))


def free_by_node(
    nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> dict[str, Need]:
    """Each schedulable node's allocatable minus the requests of the pods bound to it
    (finished pods hold nothing)."""
    used: dict[str, Need] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in DONE_PHASES:
            used[node] = used.get(node, Need()) + pod_requests(pod)
    free = {}
    for node in nodes:
        allocatable = node_allocatable(node)
        if allocatable is None or not schedulable(node):
            continue
        name = (node.get("metadata") or {}).get("name", "")
        left = used.get(name, Need())
        free[name] = Need(allocatable.cpu_m - left.cpu_m, allocatable.memory_mi - left.memory_mi)
    return free


def jobs_that_fit(
    free: dict[str, Need], worker: Need, workers: int, jobs: int, *, colocated: bool
) -> int:
    """How many of ``jobs`` TFJobs of ``workers`` workers (each requesting ``worker``)
    run at once: ``colocated`` (ReadWriteOnce) on the single roomiest node, else each
    worker on the node with the most CPU left that holds it (a job counts only whole)."""
    if colocated:
        return max((_whole_jobs(room, worker * workers, jobs) for room in free.values()), default=0)
    room = dict(free)
    for fitted in range(jobs):
        trial = dict(room)
        for _ in range(workers):
            fits = [name for name, left in trial.items() if worker.fits(left)]
            if not fits:
                return fitted
            best = max(fits, key=lambda name: (trial[name].cpu_m, trial[name].memory_mi))
            left = trial[best]
            trial[best] = Need(left.cpu_m - worker.cpu_m, left.memory_mi - worker.memory_mi)
        room = trial
    return jobs


def _whole_jobs(room: Need, job: Need, jobs: int) -> int:
    count = 0
    while count < jobs and (job * (count + 1)).fits(room):
        count += 1
    return count


def describe(free: dict[str, Need]) -> str:
    return (
        ", ".join(f"{name} {need}" for name, need in sorted(free.items())) or "no schedulable node"
    )
