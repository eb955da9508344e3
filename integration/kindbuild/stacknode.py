"""The offline node: kind's node image plus everything ``up`` would otherwise pull.

On a machine with no registry, ``up --serving-mode standard`` (and ``--with-argo``)
applies the release manifests unchanged, and their pods name images by tag. This image is
:mod:`integration.kindbuild.nodeimage`'s node with every controller image built here
(:mod:`integration.kindbuild.controllers`: the standard-mode stack and Argo) imported into
containerd and pinned, and the ones a manifest pulls ``Always`` also in a registry mirror
inside the node (:mod:`integration.kindbuild.mirror`). A cluster made from it
(``cluster.node_image``) needs no load step and leaves nothing behind when deleted.
"""

from __future__ import annotations

from pathlib import Path

from integration.kindbuild import cache, controllers, docker, mirror, nodeimage, pins

TAG = f"{nodeimage.TAG}-stack"


def _fill(container: str, archives: list[Path], always: list[str]) -> None:
    nodeimage.start_containerd(container)
    nodeimage.import_archives(container, archives)
    mirror.bake(container, nodeimage.exec_in, always)
    nodeimage.stop_containerd(container)


def ensure() -> cache.Result:
    """``distml-kind/node:<kubernetes version>-stack`` in the engine (and cached)."""
    node = nodeimage.ensure()
    specs = controllers.controllers()
    archives = [controllers.ensure(s).path / "image.tar" for s in specs]
    always = sorted(s.image for s in specs if s.pull_always)
    registry = mirror.binary()
    stamps = [node.path / "image.tar", registry.path / "docker-registry", *archives]
    key = nodeimage.inputs_key(nodeimage.TAG, stamps, Path(__file__), Path(mirror.__file__))

    def build(out: Path) -> None:
        docker.ensure_loaded([nodeimage.TAG], node.path / "image.tar")
        nodeimage.build_from(nodeimage.TAG, TAG, out, lambda c: _fill(c, archives, always))

    result = cache.cached("node-stack", f"{pins.KUBERNETES}-{key}", build)
    docker.ensure_loaded([TAG], result.path / "image.tar")
    return result
