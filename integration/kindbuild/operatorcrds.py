"""The Prometheus Operator's PodMonitor, PrometheusRule and ServiceMonitor CRDs
(``k8s/install/versions.py``'s ``PROMETHEUS_OPERATOR_CRDS``), which this machine cannot
download, made from the operator's API module the way its Makefile's ``generate-crds``
target makes the files it commits under ``example/prometheus-operator-crd/``: in
``pkg/apis/monitoring``, ``controller-gen crd:crdVersions=v1 paths=./v1/. paths=./v1alpha1/.
output:crd:dir=...`` with the controller-gen its ``scripts/go.mod`` pins, then
``scripts/generate/append-operator-version.sh``'s ``sed``: an annotation
``operator.prometheus.io/version: <VERSION>`` after controller-gen's own.

The operator's main module, which holds those files, is refused by the module proxy; its
API module is served (``integration/kindbuild/pins.py``). The files made are checked against
their pins in ``k8s/install/upstream.lock.json``, which are the sha256 of the files published
at the tag (the same bytes), and copied into the pinned files' cache
(``k8s/install/upstream_files.py``), where the tests' strict validation finds them when
``DISTML_CRD_DIR`` lacks them. Cold: about a minute on 2 cores (most of it building
controller-gen); seconds with Go's caches warm; nothing when the cache has them.

    python -m integration.kindbuild operator-crds
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

from integration.kindbuild import cache, gomodule, pins
from integration.kindbuild.run import BuildError, go_env, run
from k8s.install import upstream_files, versions

CONTROLLER_GEN = "sigs.k8s.io/controller-tools/cmd/controller-gen"
#: The Makefile's ``generate-crds`` line for ``example/prometheus-operator-crd/`` (its
#: ``CRD_OPTIONS`` is ``crd:crdVersions=v1``), run in ``pkg/apis/monitoring``.
GENERATE = ("crd:crdVersions=v1", "paths=./v1/.", "paths=./v1alpha1/.")
#: append-operator-version.sh's sed address (a regular expression, as sed reads it): the
#: line after which it adds the version annotation.
AFTER = re.compile(r"^    controller-gen.kubebuilder.io.version.*$", re.M)


class NotThePin(BuildError):
    """A file made is not the pinned one (the message says both sums)."""


def crd_pins() -> list[upstream_files.Pin]:
    """The pins of the CRD files :func:`ensure` makes."""
    found = upstream_files.by_url()
    missing = [url for url in versions.PROMETHEUS_OPERATOR_CRDS.values() if url not in found]
    if missing:
        raise BuildError(f"{', '.join(missing)}: not pinned in {upstream_files.LOCK_FILE}")
    return [found[url] for url in versions.PROMETHEUS_OPERATOR_CRDS.values()]


def annotate(text: str, version: str = pins.PROMETHEUS_OPERATOR) -> str:
    """What append-operator-version.sh does to one file (its VERSION has no "v")."""
    line = f"    operator.prometheus.io/version: {version.removeprefix('v')}"
    return AFTER.sub(lambda m: f"{m.group(0)}\n{line}", text)


def _had(pin: upstream_files.Pin) -> bool:
    try:
        upstream_files.path(pin)
    except upstream_files.Unavailable:
        return False
    return True


def controller_gen(work: Path) -> Path:
    """controller-gen at the pinned version, built in a module of ours under ``work``."""
    info = gomodule.download(pins.CONTROLLER_TOOLS_MODULE, pins.CONTROLLER_TOOLS)
    module = work / "controller-tools"
    gomodule.write_module(
        module,
        {pins.CONTROLLER_TOOLS_MODULE: pins.CONTROLLER_TOOLS},
        go_version=gomodule.go_directive(Path(info["GoMod"])),
    )
    tool = work / "bin" / "controller-gen"
    gomodule.build(module, CONTROLLER_GEN, tool)
    return tool


def generate(tool: Path, out: Path) -> None:
    """The CRD files of the pinned API module, annotated, into ``out``."""
    source = Path(
        gomodule.download(pins.PROMETHEUS_OPERATOR_APIS_MODULE, pins.PROMETHEUS_OPERATOR)["Dir"]
    )
    apis = out.parent / "monitoring"
    shutil.copytree(source, apis)
    run(["chmod", "-R", "u+w", str(apis)])
    out.mkdir(parents=True, exist_ok=True)
    run([str(tool), *GENERATE, f"output:crd:dir={out}"], cwd=apis, env=go_env(), heavy=True)
    for made in out.glob("*.yaml"):
        made.write_text(annotate(made.read_text()))


def ensure() -> cache.Result:
    """The pinned CRD files, in the pinned files' cache (or the CRD mirror); made when
    neither has them. A made file that is not the pinned one fails, saying both sums."""
    start = time.monotonic()
    wanted = crd_pins()
    if all(_had(p) for p in wanted):
        elapsed = time.monotonic() - start
        return cache.Result(upstream_files.cache_dir(), elapsed, False, 0.0)
    with tempfile.TemporaryDirectory(prefix="distml-operator-crds-") as tmp:
        out = Path(tmp) / "crds"
        generate(controller_gen(Path(tmp)), out)
        for p in wanted:
            try:
                print(f"= {p.name}: {upstream_files.store(p, out / p.name)}", flush=True)
            except upstream_files.UpstreamError as e:
                raise NotThePin(f"{e}; if the recipe changed on purpose, re-pin it") from e
    elapsed = time.monotonic() - start
    return cache.Result(upstream_files.cache_dir(), elapsed, True, elapsed)
