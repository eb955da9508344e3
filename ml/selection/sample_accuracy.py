"""The canary's model gate: each endpoint's accuracy on the same labelled, held-out images.

    python -m ml sample_accuracy --endpoint NAME=URL [--endpoint NAME=URL ...] [--count 1000]
        [--batch 100] [--source-dir D] [--timeout 30]

Sends the first ``--count`` Fashion-MNIST test images (held out: the selection chooses on
validation) to each full V2 infer URL (``http://svc/v2/models/tf-mnist[/versions/2]/infer``)
as FP32 ``pixels`` in [0, 1], ``--batch`` a request. Prints one JSON line: ``{"count": N,
"accuracy": {NAME: fraction}, "model_version": {NAME: "2"}, "labels": "<N digits>",
"predicted": {NAME: "<N digits>"}}`` (several versions: ``"1,2"``; each image's true class
and each endpoint's answer, one digit an image, so the versions are compared image by
image: ``runtime/canary/paired.py``). An endpoint that fails is exit 1, one line on stderr;
no data is exit 2.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

import numpy as np

from ml.contract import RAW_FILES, step_prog
from ml.data.dataset import NUM_CLASSES, DataError, locate_raw_files, read_idx

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TEST_IMAGES, _TEST_LABELS = RAW_FILES[2:]


class EndpointError(Exception):
    """An endpoint's failure: what it answered (or why nothing) and what to check."""


def endpoint(text: str) -> tuple[str, str]:
    """``--endpoint NAME=URL`` -> (name, url): a name of letters, digits, ``_.-`` and an
    http(s) URL with a host (ASCII, no spaces: what urllib can send)."""
    name, _, url = text.partition("=")
    if not _NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=URL, NAME of [A-Za-z0-9_.-]")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port that is no number or too large
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {url!r} is not a URL ({e})") from None
    sendable = url.isascii() and not any(c <= " " or c == "\x7f" for c in url)
    if parts.scheme not in ("http", "https") or not parts.hostname or not sendable:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {url!r} is not an http(s) URL with a host (ASCII, spaces quoted)"
        )
    return name, url


def held_out_images(source_dir: str | None, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` test images, FP32 ``[N, 28, 28, 1]`` in [0, 1], and their labels
    (DataError: no Fashion-MNIST files where ml.data.raw looks)."""
    raw = locate_raw_files(source_dir, log=lambda line: print(line, file=sys.stderr))
    images = read_idx(raw / _TEST_IMAGES)[:count]
    labels = read_idx(raw / _TEST_LABELS)[:count]
    return (images[..., np.newaxis] / np.float32(255)).astype(np.float32), labels


def infer(url: str, pixels: np.ndarray, timeout: float) -> tuple[np.ndarray, str]:
    """One V2 infer of ``pixels``: the probabilities ``[B, 10]`` and the version that answered
    (EndpointError: no answer, a status other than 200, or no V2 answer of the batch)."""
    tensor = {"name": "pixels", "datatype": "FP32", "shape": list(pixels.shape)}
    body = json.dumps({"inputs": [{**tensor, "data": pixels.ravel().tolist()}]}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as e:  # a status other than 2xx: its body says why
            with e:
                status, text = e.code, e.read()
    except (OSError, http.client.HTTPException) as e:  # refused, timed out, cut off ...
        raise EndpointError(
            f"no answer ({type(e).__name__}: {e}); check the URL, that the service is up "
            f"and answers within --timeout {timeout:g}s"
        ) from e
    if status != 200:
        raise EndpointError(f"HTTP {status}: {_error_text(text)}; check the URL's model/version")
    return _answer(text, len(pixels))


def _error_text(text: bytes) -> str:
    """The server's ``{"error": ...}``, else the body's start, on one line."""
    try:
        message = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        message = text.decode(errors="replace")[:300] or "(an empty body)"
    return " ".join(str(message).split())


def _answer(text: bytes, n: int) -> tuple[np.ndarray, str]:
    try:
        answer = json.loads(text)
        (output,) = [o for o in answer["outputs"] if o["name"] == "probabilities"]
        probabilities = np.asarray(output["data"], np.float64).reshape(n, NUM_CLASSES)
        version = answer["model_version"]
        if not isinstance(version, str):  # the protocol's: a string
            raise TypeError(f"model_version is {version!r}")
    except (ValueError, KeyError, TypeError) as e:
        raise EndpointError(
            f"HTTP 200 but not a V2 answer with {n} x {NUM_CLASSES} probabilities and a "
            f"model_version ({type(e).__name__}: {e}): {_error_text(text)[:200]}; is the "
            "URL a V2 infer URL (/v2/models/<name>[/versions/<v>]/infer)?"
        ) from None
    return probabilities, version


def predictions(url: str, pixels: np.ndarray, batch: int, timeout: float) -> tuple[np.ndarray, str]:
    """(the endpoint's class for each image, its versions comma-joined)."""
    found, versions = [], set()
    for start in range(0, len(pixels), batch):
        probabilities, version = infer(url, pixels[start : start + batch], timeout)
        found.append(probabilities.argmax(axis=1))
        versions.add(version)
    return np.concatenate(found), ",".join(sorted(versions, key=lambda v: (len(v), v)))


def digits(classes: np.ndarray) -> str:
    """One digit a class (Fashion-MNIST has ten): the report's compact form."""
    return "".join(map(str, classes.tolist()))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=step_prog("sample_accuracy"), description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--endpoint",
        type=endpoint,
        action="append",
        required=True,
        metavar="NAME=URL",
        help="a name for the report and a full V2 infer URL (repeat for each version)",
    )
    p.add_argument("--count", type=int, default=1000, help="test images sent (first N)")
    p.add_argument("--batch", type=int, default=100, help="images per request (<= --max-instances)")
    p.add_argument("--source-dir", help="directory holding the Fashion-MNIST files")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait per request")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    names = [name for name, _ in args.endpoint]
    if len(set(names)) != len(names):
        p.error(f"argument --endpoint: each NAME once, got {', '.join(names)}")
    if min(args.count, args.batch) < 1 or not 0 < args.timeout < float("inf"):
        p.error("--count and --batch take whole numbers >= 1, --timeout seconds > 0")
    try:
        pixels, labels = held_out_images(args.source_dir, args.count)
    except DataError as e:
        print(f"cannot measure accuracy: {e}", file=sys.stderr)
        return 2
    report: dict = {"count": len(labels), "accuracy": {}, "model_version": {}}
    report.update(labels=digits(labels), predicted={})
    for name, url in args.endpoint:
        try:
            found, versions = predictions(url, pixels, args.batch, args.timeout)
        except EndpointError as e:
            print(f"endpoint {name} ({url}): {e}", file=sys.stderr)
            return 1
        right = float((found == labels).mean())
        print(f"{name}: {right:.4f} of {len(labels)} (version {versions})", file=sys.stderr)
        report["accuracy"][name], report["model_version"][name] = right, versions
        report["predicted"][name] = digits(found)
    print(json.dumps(report))
    return 0
