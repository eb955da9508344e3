"""Evaluate exported SavedModels on a Fashion-MNIST split (the CLI: the test split).

    python -m ml evaluate --volume V --model-dir DIR [DIR ...]

Evaluates the artefact that would be served (its ``serving_pixels`` signature), not the
in-memory Keras model, so the score is the served model's score.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ml.contract import step_prog


class CandidateError(RuntimeError):
    """A model directory is missing, incomplete or cannot be loaded."""


def load_split_arrays(
    volume: str | Path, split: str, source_dir: str | None = None, log: Any = print
) -> tuple[Any, Any]:
    """A whole split (``ml.data.dataset.SPLITS``) as numpy arrays: (uint8 [N,28,28,1],
    int64 [N])."""
    import numpy as np

    from ml.data.dataset import load_split

    ds = load_split(Path(volume), split, source_dir=source_dir, log=log).batch(10_000)
    images, labels = [], []
    for x, y in ds.as_numpy_iterator():
        images.append(x)
        labels.append(y)
    return np.concatenate(images), np.concatenate(labels).astype("int64")


def evaluate_saved_model(
    path: str | Path, images: Any, labels: Any, batch_size: int = 1000
) -> dict[str, float]:
    """Accuracy and mean cross-entropy of the SavedModel at ``path`` on uint8 images,
    after checking that it can serve: loaded and checked as the server loads a version
    (``ml.model.servable``), and answering single images on both signatures.

    Raises:
        CandidateError: why it cannot be served or scored, so the selection skips it.
    """
    import numpy as np

    from ml.model.export import PIXELS_SIGNATURE

    path = Path(path)
    if not (path / "saved_model.pb").is_file():
        raise CandidateError(f"{path} has no saved_model.pb (training did not finish exporting?)")
    servable = _load(path)
    _check_singles(path, servable, images[:SINGLES])
    correct, total_loss = 0, 0.0
    for start in range(0, len(images), batch_size):
        x = images[start : start + batch_size].astype(np.float32) / 255.0
        y = labels[start : start + batch_size]
        probs = _answer(
            path,
            servable,
            PIXELS_SIGNATURE,
            x,
            f"images {start}-{start + len(x) - 1} of {len(images)}",
        )
        correct += int((probs.argmax(axis=1) == y).sum())
        total_loss += float(-np.log(np.clip(probs[np.arange(len(y)), y], 1e-12, 1.0)).sum())
    n = len(images)
    return {"accuracy": correct / n, "loss": total_loss / n, "examples": n}


#: How many images each signature answers one at a time: a version that fails only on
#: single images (the server's calls at one client) is caught before it serves anyone.
SINGLES = 8


def _load(path: Path) -> Any:
    from ml.model.servable import NotServable, load_servable

    try:
        return load_servable(path)
    except NotServable as e:
        raise CandidateError(f"{path} cannot serve: {e}") from e
    except Exception as e:  # TF raises many types for a damaged SavedModel
        raise CandidateError(f"{path} cannot be loaded as a SavedModel: {e}") from e


def _check_singles(path: Path, servable: Any, images: Any) -> None:
    """Each of ``images`` alone, through both signatures (PNG bytes for serving_default)."""
    import tensorflow as tf

    from ml.model.export import DEFAULT_SIGNATURE, PIXELS_SIGNATURE

    for i, image in enumerate(images):
        one = image[None].astype("float32") / 255.0
        png = tf.io.encode_png(tf.constant(image, tf.uint8)).numpy()
        _answer(path, servable, PIXELS_SIGNATURE, one, f"image {i} alone")
        _answer(path, servable, DEFAULT_SIGNATURE, [png], f"image {i} alone, as PNG")


def _answer(path: Path, servable: Any, name: str, inputs: Any, what: str) -> Any:
    """Signature ``name``'s checked probabilities for ``inputs``; CandidateError if it fails."""
    import tensorflow as tf

    from ml.model.export import OUTPUT
    from ml.model.servable import CONTRACT, NotServable, check_probabilities
    from ml.model.tf_errors import tf_detail

    try:
        out = servable.signatures[name](**{CONTRACT[name][0]: tf.constant(inputs)})[OUTPUT]
        return check_probabilities(out.numpy(), len(inputs), what=f"{name} on {what}")
    except tf.errors.OpError as e:  # it loads, but fails on these images
        raise CandidateError(f"{path} failed on {what} ({type(e).__name__}: {tf_detail(e)})") from e
    except NotServable as e:
        raise CandidateError(f"{path} cannot serve: {e}") from e


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=step_prog("evaluate"), description=__doc__.split("\n\n")[0])
    p.add_argument("--volume", required=True, help="volume root (test split from V/datasets/)")
    p.add_argument("--model-dir", nargs="+", required=True, help="SavedModel directories")
    p.add_argument("--source-dir", help="raw files, when V/datasets/ is not prepared")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ml.data.dataset import DataError

    try:
        # stdout carries only the JSON results; progress goes to stderr.
        images, labels = load_split_arrays(
            args.volume, "test", args.source_dir, log=lambda m: print(m, file=sys.stderr)
        )
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    status = 0
    for d in args.model_dir:
        try:
            print(json.dumps({"model_dir": d, **evaluate_saved_model(d, images, labels)}))
        except CandidateError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
    return status
