"""integration.kindbuild.stacknode: the offline node's service guard against this network's
egress proxy (it answers any TCP 443, ClusterIPs included)."""

from __future__ import annotations

from integration.kindbuild import pins, stacknode
from tests.support.gomod import module_source


def test_the_guard_refuses_only_tcp_still_addressed_to_the_service_range():
    starts = [
        line
        for line in stacknode.guard_unit(stacknode.SERVICE_SUBNET).splitlines()
        if line.startswith("ExecStart=")
    ]
    # Host-network processes (the API server) and pods: OUTPUT and FORWARD.
    assert [s.split()[1:3] for s in starts] == [["-A", "OUTPUT"], ["-A", "FORWARD"]]
    for start in starts:
        # -A: after kube-proxy's own jumps; its DNAT (nat table) has already run by then.
        assert f"-d {stacknode.SERVICE_SUBNET} -p tcp -j REJECT --reject-with tcp-reset" in start
    assert "Before=containerd.service kubelet.service" in stacknode.guard_unit(
        stacknode.SERVICE_SUBNET
    )


def test_the_guarded_range_is_kinds_default_service_subnet():
    default = module_source("sigs.k8s.io/kind", pins.KIND) / "pkg/apis/config/v1alpha4/default.go"
    assert f'obj.Networking.ServiceSubnet = "{stacknode.SERVICE_SUBNET}"' in default.read_text()
