"""What distml's pods ask of the cluster's one node, added up.

The scheduler places a pod by its *requests*, not by what it uses: a pod whose requests do
not fit next to the others stays Pending (and a TFJob worker that stays Pending stalls its
peers). This module adds up the requests of every pod `up` installs (the provider's own,
the upstream operators after `up`'s patches) and ours at peak (`train-all`'s workers, all
jobs at once, plus the predictors `deploy` keeps), and says how many jobs fit at once.
The preflight, `train-all`'s waves and the resource figures in docs/cluster.md all come from here.

The upstream figures are pinned below, per install step; ``tests/k8s/install/test_capacity.py``
derives the same figures from the real install manifests (``../shared/k8s-upstream``) and
the patches the plan runs, so a pin that moves without them fails that test. Standard
library only: ``python -m k8s.install.preflight`` runs before the project's dependencies exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from k8s.install import versions
from k8s.install.operators import components
from k8s.monitoring import alertmanager, stack
from k8s.providers.settings import PROVIDERS, SERVING_MODES, Resources, Settings, quantity
from ml.contract import MODEL_TYPES

MI = Decimal(2**20)


@dataclass(frozen=True)
class Need:
    """CPU (millicores) and memory (MiB) requests."""

    cpu_m: int = 0
    memory_mi: int = 0

    @classmethod
    def of(cls, requests: dict[str, str] | None) -> Need:
        """From a container's ``resources.requests`` (missing figures count as 0)."""
        requests = requests or {}
        cpu = quantity(requests.get("cpu", 0)) * 1000
        memory = quantity(requests.get("memory", 0)) / MI
        return cls(
            int(cpu.to_integral_value(ROUND_CEILING)), int(memory.to_integral_value(ROUND_CEILING))
        )

    def __add__(self, other: Need) -> Need:
        return Need(self.cpu_m + other.cpu_m, self.memory_mi + other.memory_mi)

    def __mul__(self, n: int) -> Need:
        return Need(self.cpu_m * n, self.memory_mi * n)

    def fits(self, node: Need) -> bool:
        return self.cpu_m <= node.cpu_m and self.memory_mi <= node.memory_mi

    def __str__(self) -> str:
        return f"{self.cpu_m / 1000:.2f} CPU / {self.memory_mi / 1024:.1f} GiB"


@dataclass(frozen=True)
class Pods:
    """``count`` pods named ``namespace/name``, each requesting ``need``."""

    name: str
    need: Need
    count: int = 1

    @property
    def total(self) -> Need:
        return self.need * self.count


# kubeadm's static control-plane pods, as kind and minikube run them
# (cmd/kubeadm/app/phases/controlplane/manifests.go: CPU only; phases/etcd/local.go).
KUBEADM_CONTROL_PLANE = (
    Pods("kube-system/etcd", Need(100, 100)),
    Pods("kube-system/kube-apiserver", Need(250, 0)),
    Pods("kube-system/kube-controller-manager", Need(200, 0)),
    Pods("kube-system/kube-scheduler", Need(100, 0)),
)
# The provider's own pods on its one node (what the scheduler has already given away
# before `up` installs anything), read in each provider's source:
PROVIDER_PODS: dict[str, tuple[Pods, ...]] = {
    # k3s v1.33.4+k3s1 (read at the "Update to v1.33.4" commit): manifests/coredns.yaml and
    # manifests/metrics-server/metrics-server-deployment.yaml; local-path-provisioner and
    # ServiceLB's svclb-* pods (pkg/cloudprovider/servicelb.go) request nothing.
    "k3d": (
        Pods("kube-system/coredns", Need(100, 70)),
        Pods("kube-system/metrics-server", Need(100, 70)),
    ),
    # kind v0.29.0: CoreDNS x2 (kubeadm's dns addon), kindnet (kind's
    # pkg/build/nodeimage/const_cni.go); kube-proxy and local-path-provisioner
    # (const_storage.go) request nothing.
    "kind": (
        *KUBEADM_CONTROL_PLANE,
        Pods("kube-system/coredns", Need(100, 70), 2),
        Pods("kube-system/kindnet", Need(100, 50)),
    ),
    # minikube v1.36.0 (docker driver, --cni bridge: no CNI pod): CoreDNS scaled down to 1
    # on its first start (pkg/minikube/node/start.go); storage-provisioner requests nothing.
    # metrics-server is the pinned file, as on kind.
    "minikube": (*KUBEADM_CONTROL_PLANE, Pods("kube-system/coredns", Need(100, 70))),
}

# What each install step of `up` (k8s.install.operators.components) schedules, after its patches.
# Held to the real files by tests/k8s/install/test_capacity.py.
STACK: dict[str, tuple[Pods, ...]] = {
    "training_operator": (Pods("kubeflow/training-operator", Need(0, 0)),),
    "cert_manager": (
        Pods("cert-manager/cert-manager", Need(0, 0)),
        Pods("cert-manager/cert-manager-cainjector", Need(0, 0)),
        Pods("cert-manager/cert-manager-webhook", Need(0, 0)),
    ),
    "istio": (
        Pods("istio-system/istio-ingressgateway", Need(100, 256)),
        Pods("istio-system/istiod", Need.of(versions.ISTIOD_REQUESTS)),  # after up's patch
    ),
    "gateway_node_port": (),
    "knative": (
        Pods("knative-serving/activator", Need(300, 60)),
        Pods("knative-serving/autoscaler", Need(100, 100)),
        Pods("knative-serving/controller", Need(100, 100)),
        Pods("knative-serving/webhook", Need(100, 100)),
        Pods("knative-serving/net-istio-controller", Need(30, 40)),
        Pods("knative-serving/net-istio-webhook", Need(20, 20)),
    ),
    "metrics_server": (Pods("kube-system/metrics-server", Need(100, 200)),),
    "kserve": (
        Pods("kserve/kserve-controller-manager", Need(100, 200)),
        Pods("kserve/kserve-localmodel-controller-manager", Need(100, 200)),
        Pods("kserve/llmisvc-controller-manager", Need(100, 300)),
        # kserve-localmodelnode-agent is a DaemonSet for nodes labelled
        # kserve/localmodel=worker: none here, so no pod.
    ),
    # Argo Workflows v4.1.2's install.yaml sets no resources on either container: they
    # request nothing (the scheduler places them anywhere), so they add 0 to every sum.
    "argo": (
        Pods("argo/workflow-controller", Need(0, 0)),
        Pods("argo/argo-server", Need(0, 0)),
    ),
    # KEDA 2.20.2's release file: 100m / 100Mi requested by each of its three Deployments.
    "keda": (
        Pods("keda/keda-operator", Need(100, 100)),
        Pods("keda/keda-metrics-apiserver", Need(100, 100)),
        Pods("keda/keda-admission", Need(100, 100)),
    ),
}
# Knative's queue-proxy beside each predictor: config-deployment's queue-sidecar-cpu-request
# default; its memory request applies only with queueproxy.resource-defaults Enabled (off).
QUEUE_PROXY = Need(25, 0)

# The documented minimum: a Docker engine with 4 CPUs and 8 GiB, of which a node offers
# about 7.5 GiB to pods (Docker Desktop's VM shows ~7.7 GiB of an 8 GB setting). None of
# the providers reserves CPU or memory for the system (no kube-reserved/system-reserved).
DOCUMENTED_NODE = Need(4000, 7680)
# kubelet's default memory.available eviction threshold, taken off to be safe: the three
# providers set evictionHard for disks only, so allocatable may be all of the memory.
KUBELET_EVICTION_MI = 100


def monitoring_pods() -> tuple[Pods, ...]:
    """distml's own Prometheus (``up --with-monitoring``, k8s.monitoring.stack), in its
    namespace: one pod, with Alertmanager beside Prometheus."""
    need = request_of(stack.RESOURCES) + request_of(alertmanager.RESOURCES)
    return (Pods(f"(distml's namespace)/{stack.NAME}", need),)


def stack_pods(
    provider: str, serving_mode: str, with_argo: bool = False, with_monitoring: bool = False
) -> list[Pods]:
    """Every pod on the node once `up` is done, before any of ours (but distml's own
    Prometheus, which `up --with-monitoring` starts)."""
    pods = list(PROVIDER_PODS[provider])
    for step in components(provider, serving_mode, with_argo, with_monitoring):
        pods += STACK[step]
    return pods + list(monitoring_pods() if with_monitoring else ())


def _sum(pods: list[Pods]) -> Need:
    return sum((p.total for p in pods), Need())


def request_of(r: Resources) -> Need:
    """The requests of one of our containers."""
    return Need.of({"cpu": r.cpu_request, "memory": r.memory_request})


def job_need(s: Settings) -> Need:
    """One TFJob: all its workers run at once."""
    return request_of(s.worker_resources) * s.workers


def predictor_need(s: Settings) -> Need:
    pod = request_of(s.predictor_resources)
    return pod + QUEUE_PROXY if s.serving_mode == "knative" else pod


def requirement(s: Settings, jobs: int = len(MODEL_TYPES)) -> Need:
    """The node `s` needs: the stack, ``jobs`` TFJobs at once and the minimum predictors."""
    stack = _sum(stack_pods(s.provider, s.serving_mode, s.with_argo, s.with_monitoring))
    return stack + job_need(s) * jobs + predictor_need(s) * s.min_replicas


def jobs_at_once(node: Need, s: Settings, jobs: int = len(MODEL_TYPES)) -> int:
    """How many of ``jobs`` TFJobs fit on ``node`` at once next to the rest (0: not one)."""
    return max((k for k in range(jobs + 1) if requirement(s, k).fits(node)), default=0)


def node_from_engine(cpus: int, memory_bytes: int) -> Need:
    """What a one-node cluster in a Docker engine of this size offers to pods."""
    return Need(cpus * 1000, memory_bytes // 2**20 - KUBELET_EVICTION_MI)


def node_allocatable(node: dict) -> Need | None:
    """A Node object's ``status.allocatable`` (None when it is not there)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if "cpu" not in allocatable or "memory" not in allocatable:
        return None
    return Need.of(allocatable)


def table() -> str:
    """The resource table in docs/cluster.md: what each provider x mode asks of its one node."""
    rows = [
        "| cluster | mode | the stack alone | + 1 TFJob + predictor | `train-all` at peak |",
        "|---|---|---|---|---|",
    ]
    for provider in PROVIDERS:
        for mode in SERVING_MODES:
            s = Settings(image="", provider=provider, serving_mode=mode)
            stack = _sum(stack_pods(provider, mode))
            rows.append(
                f"| {provider} | {mode} | {stack} | {requirement(s, 1)} | {requirement(s)} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
