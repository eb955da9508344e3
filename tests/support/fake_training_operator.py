"""The training operator's TFJob controller (kubeflow/training-operator v1.9.0) as far as
distml depends on it, over ``tests.support.fakekube.FakeKube``; it also plays the kubelet's part
for the pods it creates (they run at once; tests crash, delete or finish them).

Written from the source at tag v1.9.0 (commit 6f74c7f6), not from our idea of it:

- Reconcile order, ``pkg/controller.v1/common/job.go``: when the job is past its backoff
  limit, every pod is deleted first (``DeletePodsAndServices``, cleanPodPolicy ignored as
  the job has no terminal condition yet, :225, :41-49), then the job is ``Failed`` with
  reason ``TFJobFailed`` and "Job <name> has failed because it has reached the specified
  backoff limit" (:210, :243-245). Otherwise ``ReconcilePods`` (:338-351), then
  ``UpdateJobStatus`` (:354).
- ``PastBackoffLimit``, ``pkg/core/job.go:95-133``: the ``restartCount`` of every container
  of every pod in phase Running, of replicas whose restartPolicy is OnFailure, Always or
  ExitCode, summed; past when ``>= backoffLimit`` (``> 0`` when the limit is 0).
- ``ReconcilePods``, ``pkg/controller.v1/common/pod.go``: an index with no pod gets one
  (:316-324); a pod in phase Failed under OnFailure is deleted and the job gets
  ``Restarting`` (:350-366). A Running pod being deleted is neither.
- Replica counts, ``pkg/core/status.go:34-49``: Running with a deletionTimestamp counts as
  **failed**; Running as active; Succeeded and Failed as themselves.
- ``UpdateJobStatus``, ``pkg/controller.v1/tensorflow/tfjob_controller.go:485-509``: any
  failed replica fails the job ("TFJob <ns>/<name> has failed because <n> Worker
  replica(s) failed.") unless it is ``Restarting``; all succeeded: ``Succeeded``.
- A finished job stays finished (``pkg/util/status.go:105-107``); cleanPodPolicy ``None``
  leaves its pods.
"""

from __future__ import annotations

from typing import Any

from k8s.client.objects import TFJOB_API, TFJOB_LABELS, conditions, tfjob_state
from tests.support.fakekube import FakeKube

COUNTED_POLICIES = ("OnFailure", "Always", "ExitCode")
BACKOFF_MESSAGE = "Job {name} has failed because it has reached the specified backoff limit"
REPLICAS_FAILED_MESSAGE = "TFJob {ns}/{name} has failed because {n} Worker replica(s) failed."


class FakeTrainingOperator:
    """Reconciles every TFJob on each fake-clock tick."""

    def __init__(self, fake: FakeKube) -> None:
        self.fake = fake
        fake.script(self.tick)

    # ------------------------------------------------------------------ what tests do
    def pod_name(self, job: str, index: int) -> str:
        return f"{job}-worker-{index}"

    def crash(self, job: str, ns: str, indexes: tuple[int, ...] = (0, 1)) -> None:
        """A fault: each named worker's container exits non-zero and, under OnFailure, the
        kubelet restarts it in place (its restartCount goes up by one)."""
        for i in indexes:
            status = self._pod(job, ns, i)["status"]["containerStatuses"][0]
            status["restartCount"] += 1

    def delete_pod(self, job: str, ns: str, index: int) -> None:
        """``kubectl delete pod`` (a drain, an eviction): the pod is Running with a
        deletionTimestamp until the kubelet has stopped it, then gone (next tick)."""
        pod = self._pod(job, ns, index)
        pod["metadata"]["deletionTimestamp"] = self.fake.clock.timestamp()

    def finish(self, job: str, ns: str) -> None:
        """Every worker exits 0."""
        for pod in self.pods(job, ns):
            pod["status"]["phase"] = "Succeeded"

    # ------------------------------------------------------------------ the controller
    def tick(self, _t: float = 0.0) -> None:
        for (api, kind, ns, name), job in list(self.fake.objects.items()):
            if (api, kind) == (TFJOB_API, "TFJob") and tfjob_state(job) not in (
                "Succeeded",
                "Failed",
            ):
                self.reconcile(job, ns, name)
        for (_api, kind, ns, name), pod in list(self.fake.objects.items()):
            owner = pod.get("metadata", {}).get("labels", {}).get(TFJOB_LABELS[0])
            if kind == "Pod" and owner and not self.fake.obj(TFJOB_API, "TFJob", owner, ns):
                self._gone(name, ns)  # its TFJob was deleted: GC
            elif kind == "Pod" and pod["metadata"].get("deletionTimestamp"):
                if pod["status"]["phase"] == "Running":
                    pod["status"]["phase"] = "Failed"  # the kubelet stopped it: now gone
                self._gone(name, ns)

    def reconcile(self, job: dict[str, Any], ns: str, name: str) -> None:
        worker = job["spec"]["tfReplicaSpecs"]["Worker"]
        policy = worker.get("restartPolicy", "Never")
        limit = job["spec"].get("runPolicy", {}).get("backoffLimit")
        pods = self.pods(name, ns)
        if limit is not None and past_backoff_limit(pods, policy, limit):
            for pod in pods:
                self._gone(pod["metadata"]["name"], ns)
            self._condition(job, "Failed", BACKOFF_MESSAGE.format(name=name))
            return
        if self._reconcile_pods(name, ns, worker["replicas"], policy):
            self._condition(job, "Restarting", f"job {name} is restarting")
        self._update_status(job, ns, name, worker["replicas"])

    def _reconcile_pods(self, name: str, ns: str, replicas: int, policy: str) -> bool:
        restarting = False
        for i in range(replicas):
            pod = self.fake.obj("v1", "Pod", self.pod_name(name, i), ns)
            if pod is None:
                self._create_pod(name, ns, i)
            elif pod["status"]["phase"] == "Failed" and policy in COUNTED_POLICIES:
                self._gone(self.pod_name(name, i), ns)
                restarting = True
        return restarting

    def _update_status(self, job: dict[str, Any], ns: str, name: str, replicas: int) -> None:
        active = failed = succeeded = 0
        for pod in self.pods(name, ns):
            phase = pod["status"]["phase"]
            if phase == "Running" and pod["metadata"].get("deletionTimestamp"):
                failed += 1
            elif phase == "Running":
                active += 1
            elif phase == "Succeeded":
                succeeded += 1
            elif phase == "Failed":
                failed += 1
        status = job.setdefault("status", {})
        status["replicaStatuses"] = {
            "Worker": {"active": active, "succeeded": succeeded, "failed": failed}
        }
        if failed and tfjob_state(job) != "Restarting":
            self._condition(
                job, "Failed", REPLICAS_FAILED_MESSAGE.format(ns=ns, name=name, n=failed)
            )
        elif succeeded == replicas:
            self._condition(job, "Succeeded", f"TFJob {ns}/{name} successfully completed.")
        elif active == replicas:
            self._condition(job, "Running", f"TFJob {ns}/{name} is running.")

    # ------------------------------------------------------------------ helpers
    def pods(self, name: str, ns: str) -> list[dict[str, Any]]:
        label = TFJOB_LABELS[0]
        return [
            p
            for (_a, kind, pns, _n), p in self.fake.objects.items()
            if kind == "Pod" and pns == ns and p["metadata"]["labels"].get(label) == name
        ]

    def _gone(self, pod: str, ns: str) -> None:
        """A pod deleted for good, and its logs with it (as on a real cluster)."""
        self.fake.remove("v1", "Pod", pod, ns)
        self.fake.log_texts = {k: v for k, v in self.fake.log_texts.items() if k[0] != pod}

    def _pod(self, job: str, ns: str, index: int) -> dict[str, Any]:
        pod = self.fake.obj("v1", "Pod", self.pod_name(job, index), ns)
        assert pod is not None, f"no pod {self.pod_name(job, index)}"
        return pod

    def _create_pod(self, name: str, ns: str, index: int) -> None:
        labels = {TFJOB_LABELS[0]: name, "training.kubeflow.org/replica-index": str(index)}
        self.fake.add_pod(ns, self.pod_name(name, index), labels, phase="Running")

    def _condition(self, job: dict[str, Any], ctype: str, message: str) -> None:
        """Set ``ctype`` True (Running and Restarting exclude each other, as upstream's
        ``filterOutCondition`` does); the reason is ``TFJob<Type>``."""
        conds = [c for c in conditions(job) if c.get("type") != ctype]
        if ctype in ("Running", "Restarting"):
            other = "Restarting" if ctype == "Running" else "Running"
            conds = [c if c.get("type") != other else {**c, "status": "False"} for c in conds]
        if not conds:
            conds.append({"type": "Created", "status": "True", "reason": "TFJobCreated"})
        conds.append(
            {"type": ctype, "status": "True", "reason": f"TFJob{ctype}", "message": message}
        )
        job.setdefault("status", {})["conditions"] = conds


def past_backoff_limit(pods: list[dict[str, Any]], policy: str, limit: int) -> bool:
    """``PastBackoffLimit`` at v1.9.0 (pkg/core/job.go:95-133)."""
    if policy not in COUNTED_POLICIES:
        return False
    total = sum(
        int(cs.get("restartCount") or 0)
        for pod in pods
        if pod["status"].get("phase") == "Running"
        for cs in (pod["status"].get("initContainerStatuses") or [])
        + (pod["status"].get("containerStatuses") or [])
    )
    return total > 0 if limit == 0 else total >= limit
