"""Whether a SavedModel can serve: the export contract (``ml/model/export.py``) checked the
way the server loads a version, so the selection refuses what the server could not serve.

``load_servable`` loads a SavedModel and checks each of the contract's signatures: present,
its one input named, typed and shaped as the contract says, and answering a blank image
with one row of probabilities (which also pays TensorFlow's slow first call). The server
loads every version with it (``ml/server/watcher.py``), the selection every candidate
(``ml/selection/evaluate.py``). ``check_probabilities`` is what every answer must be; the
server checks each one before it goes out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ml.model.architectures import INPUT_SHAPE, NUM_CLASSES
from ml.model.export import BYTES_INPUT, DEFAULT_SIGNATURE, OUTPUT, PIXELS_INPUT, PIXELS_SIGNATURE

#: signature -> (its one input, dtype name, shape): the export contract's table.
CONTRACT: Mapping[str, tuple[str, str, tuple[int | None, ...]]] = {
    DEFAULT_SIGNATURE: (BYTES_INPUT, "string", (None,)),
    PIXELS_SIGNATURE: (PIXELS_INPUT, "float32", (None, *INPUT_SHAPE)),
}
#: How far a row of probabilities may sum from 1 (float32 softmax rounding is ~1e-6).
SUM_TOLERANCE = 1e-3


class NotServable(ValueError):
    """A SavedModel, or one of its answers, breaks the export contract; says how."""


class Servable(NamedTuple):
    signatures: Mapping[str, Callable[..., Any]]
    #: The loaded SavedModel object: its variables live as long as it does.
    saved_model: Any


def load_servable(path: str | Path) -> Servable:
    """Load ``path`` and check it against the contract (see the module doc).

    Raises:
        NotServable: a signature is missing or differs from the contract, or answers a
            blank image with something that is not one row of probabilities.
        Exception: whatever TensorFlow raises for a SavedModel it cannot load.
    """
    import tensorflow as tf

    saved_model = tf.saved_model.load(str(path))
    signatures = {name: _checked(saved_model.signatures, name) for name in CONTRACT}
    blank = tf.zeros([1, *INPUT_SHAPE], tf.float32)
    warm = {
        PIXELS_SIGNATURE: blank,
        DEFAULT_SIGNATURE: tf.expand_dims(tf.io.encode_png(tf.cast(blank[0], tf.uint8)), 0),
    }
    for name, tensor in warm.items():
        out = signatures[name](**{CONTRACT[name][0]: tensor})
        if OUTPUT not in out:
            raise NotServable(f"signature {name!r} answers {sorted(out)}, not {OUTPUT!r}")
        check_probabilities(out[OUTPUT].numpy(), 1, what=f"signature {name!r} on a blank image")
    return Servable(signatures, saved_model)


def _checked(found: Mapping[str, Any], name: str) -> Callable[..., Any]:
    if name not in found:
        raise NotServable(
            f"no signature {name!r} (has {', '.join(sorted(found)) or 'none'}); export it "
            "with ml.model.export.export_model"
        )
    fn = found[name]
    specs = fn.structured_input_signature[1]
    want_input, want_dtype, want_shape = CONTRACT[name]
    if set(specs) != {want_input}:
        raise NotServable(f"signature {name!r} takes {sorted(specs)}, expected [{want_input!r}]")
    spec = specs[want_input]
    shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else None
    if spec.dtype.name != want_dtype or shape != want_shape:
        raise NotServable(
            f"signature {name!r} takes {want_input!r} as {spec.dtype.name} {shape}, expected "
            f"{want_dtype} {want_shape}"
        )
    return fn


def check_probabilities(rows: Any, instances: int, what: str = "the answer") -> np.ndarray:
    """``rows`` as an array, if it is ``instances`` rows of ``NUM_CLASSES`` finite
    probabilities in [0, 1] each summing to 1.

    Raises:
        NotServable: saying which instance broke which rule, and how many did.
    """
    array = np.asarray(rows)
    if array.shape != (instances, NUM_CLASSES):
        raise NotServable(
            f"{what} has shape {array.shape} for {instances} image(s), expected "
            f"({instances}, {NUM_CLASSES})"
        )
    finite = np.isfinite(array).all(axis=1)
    ranged = ((array >= 0) & (array <= 1)).all(axis=1)
    summed = np.abs(array.sum(axis=1, dtype=np.float64) - 1) <= SUM_TOLERANCE
    bad = np.flatnonzero(~(finite & ranged & summed))
    if bad.size:
        i = int(bad[0])
        rule = "non-finite" if not finite[i] else "out of [0, 1] or not summing to 1"
        raise NotServable(
            f"{what}: probabilities {rule} for instance {i} ({bad.size} of {instances})"
        )
    return array
