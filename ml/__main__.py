"""``python -m ml <step> [FLAGS]``: every step the image runs, one entry point (the steps
and their modules: ``ml.contract.STEPS``). Without a step (the image's default command),
``-h`` or ``--help``: how to run each."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from ml.contract import DEFAULT_SERVICE, PROFILES, STEPS, USAGE_EXIT

USAGE = """distml pod image: every step is `python -m ml <step>`; `python -m ml <step> --help`
shows all its flags.

  ingest   python -m ml ingest --volume /trained_model [--source-dir DIR]
  train    python -m ml train --volume /trained_model --model-type cnn [--profile {profiles}]
           (one per worker; TF_CONFIG from the training operator makes it multi-worker)
  select   python -m ml select --volume /trained_model --service {svc} [--min-accuracy A]
  canary_publish
           python -m ml canary_publish --volume /trained_model --service {svc} \\
               (--promote | --reject) --record FILE
           (ends the canary `select --canary` published, with the analysis in FILE)
  canary_weight
           python -m ml canary_weight --volume /trained_model --service {svc} --weight W
  serve    python -m ml serve --model-dir /trained_model/serving/{svc} \\
               --model-name {svc} --host 0.0.0.0 --http-port 8080
  evaluate python -m ml evaluate --volume /trained_model --model-dir DIR
  sample   python -m ml sample --out-dir DIR [--source-dir DIR] [--synthetic-ok]
  sample_accuracy
           python -m ml sample_accuracy --endpoint NAME=URL [--endpoint NAME=URL ...] \\
               [--count 1000] [--source-dir DIR]
           (the canary's model gate: each endpoint's accuracy on the same test images)

The volume (a PVC mounted at /trained_model) must be writable by UID 1000.
""".format(profiles="|".join(PROFILES), svc=DEFAULT_SERVICE)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    step, flags = argv[0], argv[1:]
    if step not in STEPS:
        print(
            f"error: python -m ml has no step {step!r}; the steps: {', '.join(STEPS)} "
            "(python -m ml --help shows how to run each)",
            file=sys.stderr,
        )
        return USAGE_EXIT
    return int(importlib.import_module(STEPS[step]).main(flags) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
