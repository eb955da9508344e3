"""What train-all and the workflow share about the TFJobs they submit: an old TFJob of the
same name goes first (saying what it replaces), and how many of them the node runs at once
(``k8s.install.capacity``)."""

from __future__ import annotations

from k8s.client.kube import KubeError
from k8s.client.objects import TERMINAL, TFJOB_API, tfjob_state
from k8s.install import capacity, node_capacity
from k8s.providers.settings import Settings
from runtime.cluster.apply import delete_and_wait
from runtime.cluster.context import ClusterContext


def replace_tfjob(cx: ClusterContext, name: str) -> None:
    """A TFJob of the same name goes first (a running one resumes from its saved step)."""
    old = cx.get(TFJOB_API, "TFJob", name)
    if old is None:
        return
    cx.require_ours(old, f"replace TFJob {name}")
    old_state = tfjob_state(old)
    cx.out(
        f"TFJob {name}: replacing the "
        + (
            f"{old_state.lower()} job"
            if old_state in TERMINAL
            else "running job (its workers save the step they reached; resumed there)"
        )
    )
    delete_and_wait(cx, TFJOB_API, "TFJob", name)


def jobs_that_fit(cx: ClusterContext, s: Settings, jobs: int) -> int:
    """All jobs at once, unless the node's allocatable CPU/memory cannot hold their
    workers next to the stack (k8s.install.capacity): then as many as fit (at least one)."""
    try:
        nodes = cx.kube.list("v1", "Node")
    except KubeError as e:  # a user whose rights end at their namespace (a 403 only)
        if not e.forbidden:
            raise
        cx.out(f"note: the nodes cannot be listed ({e}): submitting all {jobs} jobs")
        return jobs
    if len(nodes) > 1 or not s.owns_cluster:
        return _fit_on_nodes(cx, s, nodes, jobs)
    node = capacity.node_allocatable(nodes[0]) if len(nodes) == 1 else None
    if node is None:
        return jobs
    fit = capacity.jobs_at_once(node, s, jobs)
    if fit < jobs:
        cx.out(
            f"the node offers pods {node}; {jobs} TFJobs at once need "
            f"{capacity.requirement(s, jobs)} of requests: running {max(fit, 1)} at a time"
            + ("" if fit else " (even one may not fit: its workers may stay Pending)")
        )
    return max(fit, 1)


def _fit_on_nodes(cx: ClusterContext, s: Settings, nodes: list, jobs: int) -> int:
    """A cluster of several nodes (or one distml did not make): the room each node has
    left now, job by job (k8s.install.node_capacity)."""
    try:
        pods = cx.kube.list("v1", "Pod")  # every namespace: what the nodes hold already
    except KubeError as e:  # a user whose rights end at their namespace
        cx.out(f"note: the nodes' room is unknown ({e}): submitting all {jobs} jobs")
        return jobs
    free = node_capacity.free_by_node(nodes, pods)
    worker = capacity.request_of(s.worker_resources)
    colocated = s.volume_access == "ReadWriteOnce"
    where = "on the volume's one node (ReadWriteOnce)" if colocated else "over the nodes"
    bound = _volume_node(cx, s) if colocated else None
    if bound in free:  # the claim is bound: every pod that mounts it runs there
        free, where = {bound: free[bound]}, f"on the volume's node {bound} (ReadWriteOnce)"
    fit = node_capacity.jobs_that_fit(free, worker, s.workers, jobs, colocated=colocated)
    if fit < jobs:
        cx.out(
            f"the nodes have room for {node_capacity.describe(free)}; {jobs} TFJobs of "
            f"{s.workers} workers ({worker} each) fit {fit} at a time {where}: running "
            f"{max(fit, 1)} at a time"
            + ("" if fit else " (even one may not fit: its workers may stay Pending)")
        )
    return max(fit, 1)


# Set on a WaitForFirstConsumer claim by the scheduler when its first pod is placed: the
# node the volume is made on (and stays on, for a ReadWriteOnce local volume).
SELECTED_NODE = "volume.kubernetes.io/selected-node"


def _volume_node(cx: ClusterContext, s: Settings) -> str | None:
    claim = cx.get("v1", "PersistentVolumeClaim", s.volume) or {}
    return ((claim.get("metadata") or {}).get("annotations") or {}).get(SELECTED_NODE)
