"""The pod contract's canary commands (``ml/contract/__init__.py`` holds the rest): how the
orchestration of ``deploy --canary`` runs the steps in the image, locally or as a cluster's
Jobs. Stdlib only, as ``ml/contract/__init__.py`` is."""

from __future__ import annotations

from collections.abc import Mapping

from ml.contract import AnyPath, step_argv


def canary_end(
    volume: AnyPath,
    service: str,
    *,
    promote: bool,
    record: AnyPath | None = None,
    record_json: str | None = None,
    python: str = "python",
) -> list[str]:
    """``ml.selection.canary_publish``: promote the canary into serving, or reject it into
    :func:`rejected_dir`; the analysis (a JSON object: the file ``record``, or the text
    ``record_json`` where no file can be shared, as with a cluster's Job) is kept in its
    publish.json."""
    argv = [*step_argv(python, "canary_publish"), "--volume", str(volume), "--service", service]
    argv.append("--promote" if promote else "--reject")
    if record_json is not None:
        return [*argv, f"--record-json={record_json}"]  # one word, whatever its first character
    return [*argv, "--record", str(record)]


def canary_weight(
    volume: AnyPath,
    service: str,
    weight: int,
    *,
    url: str | None = None,
    shadow: int = 0,
    python: str = "python",
) -> list[str]:
    """``ml.selection.canary_weight``: the canary's share of requests, written into the
    volume; ``url``: the canary's own server, ``shadow``: the share mirrored to it."""
    argv = [*step_argv(python, "canary_weight"), "--volume", str(volume), "--service", service]
    argv += ["--weight", str(weight), *(["--url", url] if url else [])]
    return argv + (["--shadow", str(shadow)] if shadow else [])


#: The model gate's sample: half the test split. Paired on the same images, McNemar's test at
#: p <= 0.002 then catches a true 1.5-point drop with >= 90 % probability when the versions
#: disagree on 6 % of images, and rolls back an equal version 0.2 % of the time
#: (tests/runtime/canary/test_paired.py simulates both; docs/serving.md states them).
SAMPLE_IMAGES = 5000


def sample_accuracy(
    endpoints: Mapping[str, str],
    source_dir: str | None = None,
    *,
    count: int = SAMPLE_IMAGES,
    batch: int = 100,
    timeout: float = 30.0,
    python: str = "python",
) -> list[str]:
    """``ml sample_accuracy``: each endpoint's accuracy (name -> a full V2 infer URL) on the
    first ``count`` Fashion-MNIST test images, ``batch`` a request. Prints one JSON line:
    ``{"count": N, "accuracy": {name: fraction}, "model_version": {name: "2"}, "labels":
    "<digits>", "predicted": {name: "<digits>"}}``; exit 1: an
    endpoint failed (its one stderr line says which and what it answered), 2: no data."""
    argv = [*step_argv(python, "sample_accuracy")]
    argv += [f"--endpoint={name}={url}" for name, url in endpoints.items()]
    argv += ["--count", str(count), "--batch", str(batch), "--timeout", f"{timeout:g}"]
    return argv + (["--source-dir", str(source_dir)] if source_dir else [])
