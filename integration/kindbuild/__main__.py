"""``python -m integration.kindbuild [STEP ...]``: build (or find cached) each step, in
order, and print what each took. With no step: the offline node (``node-stack``) and
everything in it: kind's node image, the standard-mode controllers' images
(``controllers``), Argo's (``argo-images``) and the monitoring stack's (``monitoring-images``:
Prometheus, Alertmanager, KEDA); and KEDA's install file (``keda-manifest``).
``minikube-node`` builds minikube's offline node instead (``nox -s integration -- minikube
... --offline``): the minikube CLI and everything that node holds. ``--prune`` then
deletes every cache entry the full kind build did not use (older versions, interrupted
builds, the minikube entries).
Before the first step it checks the machine's packages (``sysdeps``) and its free disk
(``diskspace``), and builds nothing when either falls short. ``operator-crds`` (not in the
default build, and needing Go only: no check) makes the Prometheus Operator's CRDs the unit
tests validate against."""

from __future__ import annotations

import argparse
import sys
import time

from integration.kindbuild import (
    cache,
    controllers,
    diskspace,
    images,
    kedafile,
    kubernetes,
    minikube,
    minikubenode,
    nodebase,
    nodeimage,
    operatorcrds,
    rootfs,
    stacknode,
    sysdeps,
    tools,
)
from integration.kindbuild.run import BuildError

MINIKUBE_USAGE = """
To use it:
  export PATH={minikube}:{kube}:/usr/bin:$PATH
  minikube start --driver docker --container-runtime containerd --cni bridge \\
    --base-image {image} --preload=false --cache-images=false
or, for distml's commands: INVOKE_CLUSTER_NODE_IMAGE={image} (with --runtime minikube)
"""
USAGE = """
To use them:
  export PATH={kind}:{kube}:/usr/bin:$PATH
  kind create cluster --image {image}
or, for distml's commands: INVOKE_CLUSTER_NODE_IMAGE={image}
"""

STEPS = {
    "kind": tools.kind,
    "kubernetes": kubernetes.ensure,
    "crictl": tools.crictl,
    "netbase": lambda: rootfs.net_base()[1],
    "base": lambda: nodebase.ensure()[1],
    "kube-images": images.kube_images,
    "etcd": images.etcd,
    "coredns": images.coredns,
    "pause": images.pause,
    "kindnetd": images.kindnetd,
    "local-path-provisioner": images.local_path_provisioner,
    "local-path-helper": images.local_path_helper,
    "node-image": nodeimage.ensure,
    "kustomize": kedafile.kustomize,
    "keda-manifest": kedafile.ensure,
    "operator-crds": operatorcrds.ensure,
    "node-stack": stacknode.ensure,
    # minikube's (not in the default build): nox -s integration -- minikube ... --offline
    "minikube": minikube.ensure,
    "storage-provisioner": minikube.storage_provisioner,
    "minikube-base": lambda: minikubenode.base()[1],
    "minikube-node": minikubenode.ensure,
}
MINIKUBE_STEPS = ("minikube", "storage-provisioner", "minikube-base", "minikube-node")
# Steps no node needs (not in the default build): what the unit tests validate against.
TEST_STEPS = ("operator-crds",)
# Steps that stand for several controller images, and each image as a step of its own.
GROUPS = {"controllers": "standard", "argo-images": "argo", "monitoring-images": "monitoring"}
CONTROLLERS = controllers.by_name()
DEFAULT = [
    *[s for s in STEPS if s != "node-stack" and s not in (*MINIKUBE_STEPS, *TEST_STEPS)],
    *GROUPS,
    "node-stack",
]


def plan(steps: list[str]) -> list[str]:
    """The steps to run, in order, each group expanded into its images' names."""
    out: list[str] = []
    for step in steps or DEFAULT:
        names = [c.name for c in controllers.group(GROUPS[step])] if step in GROUPS else [step]
        out += [n for n in names if n not in out]
    return out


def target(steps: list[str]) -> str:
    """Whose node the steps build, for the disk check: minikube's when they are all its
    own steps, else kind's (every other step is part of kind's full build)."""
    return "minikube" if set(steps) <= set(MINIKUBE_STEPS) else "kind"


def run_step(step: str):
    if step in CONTROLLERS:
        return controllers.ensure(CONTROLLERS[step])
    return STEPS[step]()


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m integration.kindbuild", description=__doc__)
    choices = [*STEPS, *GROUPS, *CONTROLLERS]
    parser.add_argument(
        "steps",
        nargs="*",
        metavar="STEP",
        help=f"what to build (default: {', '.join(DEFAULT)}); one of {', '.join(choices)}",
    )
    parser.add_argument(
        "--prune",
        action="store_true",
        help="after the full build, delete every cache entry it did not use",
    )
    args = parser.parse_args(argv)
    if args.prune and args.steps:
        parser.error("--prune needs the full build (no STEP): only it knows every entry in use")
    unknown = sorted(set(args.steps) - set(choices))
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; choose from {', '.join(choices)}")
    return args


def preflight(steps: list[str]) -> str | None:
    """What the machine lacks for ``steps`` (packages, then disk), or None. Steps that only
    need Go (:data:`TEST_STEPS`) are not checked."""
    if set(steps) <= set(TEST_STEPS):
        return None
    who = "python -m integration.kindbuild"
    lacking = sysdeps.missing(sysdeps.needs("kindbuild"))
    if lacking:  # all at once, before a build that takes most of an hour cold
        return sysdeps.report(lacking, who)
    # before the first build, not when the disk fills halfway through
    return diskspace.shortfall(diskspace.needs(target(steps)), who)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    steps = plan(args.steps)
    problem = preflight(steps)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    report = []
    start = time.monotonic()
    try:
        for step in steps:
            result = run_step(step)
            how = "built" if result.built else "cached"
            report.append(
                f"{step:24} {how:6} {result.seconds:7.1f}s (cold {result.cold_seconds:6.0f}s)"
                f"  {result.path}"
            )
        if args.prune:
            gone = cache.prune(set(cache.USED))
            report.append(f"pruned {len(gone)} unused cache entries: {', '.join(gone) or '-'}")
    except BuildError as e:
        print(f"kindbuild: {e}", file=sys.stderr)
        return 1
    finally:
        print("\n".join(report))
        print(f"total {time.monotonic() - start:.1f}s")
    if "minikube-node" in steps:
        print(
            MINIKUBE_USAGE.format(
                minikube=minikube.ensure().path / "bin",
                kube=kubernetes.ensure().path / "bin",
                image=minikubenode.TAG,
            )
        )
    if {"node-image", "node-stack"} & set(steps):
        print(
            USAGE.format(
                kind=tools.kind().path / "bin",
                kube=kubernetes.ensure().path / "bin",
                image=stacknode.TAG if "node-stack" in steps else nodeimage.TAG,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
