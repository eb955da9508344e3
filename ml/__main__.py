"""``python -m ml``: the image's default command. Prints how to run each step."""

from ml.contract import DEFAULT_SERVICE, PROFILES

USAGE = """distml pod image: every step is `python -m ml.<step>`; run one with --help for all flags.

  ingest   python -m ml.ingest --volume /trained_model [--source-dir DIR]
  train    python -m ml.train  --volume /trained_model --model-type cnn [--profile {profiles}]
           (one per worker; TF_CONFIG from the training operator makes it multi-worker)
  select   python -m ml.select --volume /trained_model --service {svc} [--min-accuracy A]
  canary_publish
           python -m ml.canary_publish --volume /trained_model --service {svc} \\
               (--promote | --reject) --record FILE
           (ends the canary `ml.select --canary` published, with the analysis in FILE)
  serve    python -m ml.serve  --model-dir /trained_model/serving/{svc} \\
               --model-name {svc} --host 0.0.0.0 --http-port 8080
  evaluate python -m ml.evaluate --volume /trained_model --model-dir DIR
  sample   python -m ml.sample --out-dir DIR [--source-dir DIR] [--synthetic-ok]
  sample_accuracy
           python -m ml.sample_accuracy --endpoint NAME=URL [--endpoint NAME=URL ...] \\
               [--count 1000] [--source-dir DIR]
           (the canary's model gate: each endpoint's accuracy on the same test images)

The volume (a PVC mounted at /trained_model) must be writable by UID 1000.
""".format(profiles="|".join(PROFILES), svc=DEFAULT_SERVICE)


def main() -> int:
    print(USAGE, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
