"""Build everything a kind cluster needs on a machine with no container registry.

Every piece comes from a Go module (through the Go module proxy) or a Debian package,
at the versions :mod:`integration.kindbuild.pins` names, and lands in a cache outside the
repository keyed by component and version::

    ${DISTML_KIND_CACHE:-/var/cache/distml-kind}/<component>-<version>/

An entry is complete once its ``build.json`` exists (written last, with the build's
wall time); a second run finds it and builds nothing. Heavy commands run under
``nice -n 19 ionice -c3`` with a small ``go build -p``: these machines have 2 CPUs.

The controllers the standard-mode stack's release manifests run (training operator,
cert-manager, metrics-server, KServe, kube-rbac-proxy; Argo for ``up --with-argo``;
Prometheus, Alertmanager and KEDA for ``up --with-monitoring``) are built the same way
(:mod:`integration.kindbuild.controllers`), tagged exactly as those manifests name them,
and baked into the offline node (:mod:`integration.kindbuild.stacknode`, with a mirror
inside for the ones a manifest pulls ``Always``). KEDA's install file, which cannot be
downloaded here, is made from its module (:mod:`integration.kindbuild.kedafile`).

Run: ``python -m integration.kindbuild [STEP ...]`` (``--help`` lists
the steps).
"""
