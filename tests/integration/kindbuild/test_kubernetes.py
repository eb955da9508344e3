"""integration.kindbuild.kubernetes: the version flags every Kubernetes binary is linked with,
so each reports the pinned version."""

from __future__ import annotations

from integration.kindbuild import kubernetes


def test_every_binary_reports_the_pinned_version():
    flags = kubernetes.version_ldflags("v1.33.1", "abc", "2025-05-15T08:19:07Z")
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        assert f"-X '{pkg}.gitVersion=v1.33.1'" in flags
        assert f"-X '{pkg}.gitMinor=33'" in flags
