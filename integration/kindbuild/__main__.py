"""``python -m integration.kindbuild [STEP ...]``: build (or find cached) each step, in
order, and print what each took. With no step: everything, ending with the node image."""

from __future__ import annotations

import argparse
import sys
import time

from integration.kindbuild import images, kubernetes, nodebase, nodeimage, rootfs, tools
from integration.kindbuild.run import BuildError

USAGE = """
To use them:
  export PATH={kind}:{kube}:/usr/bin:$PATH
  kind create cluster --image {image}
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
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integration.kindbuild", description=__doc__)
    parser.add_argument(
        "steps", nargs="*", metavar="STEP", help=f"what to build (default all): {', '.join(STEPS)}"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    report = []
    start = time.monotonic()
    try:
        for step in args.steps or list(STEPS):
            result = STEPS[step]()
            how = "built" if result.built else "cached"
            report.append(
                f"{step:24} {how:6} {result.seconds:7.1f}s (cold {result.cold_seconds:6.0f}s)"
                f"  {result.path}"
            )
    except BuildError as e:
        print(f"kindbuild: {e}", file=sys.stderr)
        return 1
    finally:
        print("\n".join(report))
        print(f"total {time.monotonic() - start:.1f}s")
    if not args.steps or "node-image" in args.steps:
        print(
            USAGE.format(
                kind=tools.kind().path / "bin",
                kube=kubernetes.ensure().path / "bin",
                image=nodeimage.TAG,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
