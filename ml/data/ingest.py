"""Pod step ``ingest``: prepare tfds ``fashion_mnist`` in ``<volume>/datasets``.

    python -m ml ingest --volume V [--source-dir D] [--mirror URL]

Idempotent: a volume that already holds the prepared dataset is left untouched. Exit codes:
0 done (or nothing to do), 2 a data problem (message on stderr says how to fix it). On
success the last stdout line is one JSON object, ``records.IngestResult``, e.g.
``{"ingest": "already-prepared", "dataset": "V/datasets/fashion_mnist"}``; read it with
``records.read_ingest_line``.
"""

from __future__ import annotations

import argparse
import sys

from ml.contract import DATA_DIR_ENV, step_prog
from ml.contract.records import IngestResult
from ml.data import dataset, raw


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=step_prog("ingest"),
        description="Find (or download) the Fashion-MNIST files, verify them and prepare the "
        "tfds fashion_mnist dataset in VOLUME/datasets.",
    )
    parser.add_argument(
        "--volume",
        required=True,
        help="the shared volume; the dataset is prepared in VOLUME/datasets",
    )
    parser.add_argument(
        "--source-dir",
        default=None,
        help="directory holding the four original .gz files, searched first "
        f"(default: ${DATA_DIR_ENV}, then {raw.DEBIAN_DIR}, then {raw.KERAS_DIR})",
    )
    parser.add_argument(
        "--mirror",
        default=None,
        help="base URL to download the files from when no directory has them "
        f"(default: ${raw.MIRROR_ENV}, else {raw.DEFAULT_MIRROR})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ingest step; return the process exit code."""
    args = _parser().parse_args(argv)
    import tensorflow_datasets as tfds

    tfds.disable_progress_bar()  # tqdm bars flood pod logs; prepare logs its own lines
    try:
        changed = dataset.prepare(
            args.volume, source_dir=args.source_dir, mirror=args.mirror, log=print
        )
    except dataset.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = IngestResult(
        status=IngestResult.PREPARED if changed else IngestResult.ALREADY_PREPARED,
        dataset=str(dataset.datasets_dir(args.volume) / dataset.TFDS_NAME),
    )
    print(result.line(), flush=True)
    return 0
