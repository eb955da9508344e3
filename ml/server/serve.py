"""Serve the newest published model version over KServe's V1 REST protocol.

    python -m ml serve --model-dir V/serving/S --model-name S [--canary-dir V/serving/S/canary]
        [--host 127.0.0.1] [--http-port 8080] [--poll-interval 2.0] [--request-header-timeout 10]
        [--max-instances 256] [--max-body-bytes 8388608] [--max-image-pixels 4096x4096]
        [--max-request-pixels 8192x8192] [KServe's server flags]

``POST /v1/models/<name>:predict`` answers predictions; ``GET /v1/models/<name>`` is the
readiness probe (200 once a version is loaded, 503 before); ``POST /v2/models/<name>/infer``
and ``GET /v2/models/<name>/ready`` are the same in KServe's V2 protocol (the Open Inference
Protocol), with its other read-only routes: ``GET /v2/health/live``, ``GET
/v2/health/ready`` (503 before a version loads), ``GET /v2`` (server metadata) and ``GET
/v2/models/<name>`` (the served signatures' inputs and outputs); ``GET /`` is liveness;
``GET /metrics`` is Prometheus's page (``ml/server/metrics.py``: every other request
counted and timed). Every other URL answers 404 (``ml/server/routes.py``). The server polls
``--model-dir`` every ``--poll-interval`` seconds and serves the newest integer version
directory (``ml/server/watcher.py``). Request forms and answers: ``ml/server/v1.py`` and
``ml/server/v2.py``. Answers ``{"predictions": [[10 probabilities], ...], "model_version":
N}`` (row form) or ``{"outputs": ..., "model_version": N}`` (columnar form, as TF Serving
does), plus ``"class_names"`` when asked. Client mistakes get a 4xx with ``{"error":
"..."}`` saying what is wrong and how to fix it.

Every socket binds ``--host`` (KServe 0.21 hard-codes 0.0.0.0:
``ml/server/kserve_adapter.py``). One process, REST only: KServe's ``--workers`` other than
1 and ``--enable_grpc true`` are refused.

This module is the command only (its flags, KServe's import, logging, ``main``): the server
is the ``ml.server`` package.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ml import contract
from ml.contract import step_prog
from ml.server.instances import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_REQUEST_PIXELS,
)

log = logging.getLogger("ml.server.serve")  # not __name__: that is "__main__" under -m

DEFAULT_MODEL_NAME = contract.DEFAULT_SERVICE
DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8080
DEFAULT_POLL_INTERVAL = 2.0
DEFAULT_REQUEST_HEADER_TIMEOUT = 10.0
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


def load_kserve(argv: Sequence[str] = ()) -> ModuleType:
    """Import the KServe adapter (``ml.server.kserve_adapter``, and kserve) with ``argv`` as the
    command line.

    ``kserve.model_server`` parses ``sys.argv`` with its own parser when first imported (a few
    of its flags, such as ``--configure_logging``, are read only from there), so it is given
    this command's own arguments, not those of whatever process imports this module first.
    """
    saved = sys.argv
    sys.argv = [saved[0] if saved else "ml serve", *argv]
    try:
        from ml.server import kserve_adapter
    finally:
        sys.argv = saved
    return kserve_adapter


# --------------------------------------------------------------------------- CLI


def _pixel_limit(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", text)
    value = 0
    if match:
        value = int(match[1]) * (int(match[2]) if match[2] else 1)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a pixel count (16777216) or WIDTHxHEIGHT (4096x4096), got {text!r}"
        )
    return value


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse type: a finite number above 0, of type ``kind`` (int or float)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    return parse


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    """This command's flags, then KServe's own server flags (its parser as a parent, as
    KServe's model servers do; ``--http_port``/``--model_name`` are aliases of ours)."""
    load_kserve()
    from kserve import model_server

    kserve_flags = copy.deepcopy(model_server.parser)  # set_defaults below edits the copy
    p = argparse.ArgumentParser(
        prog=step_prog("serve"),
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        parents=[kserve_flags],
    )
    p.add_argument(
        "--model-dir",
        required=True,
        help="directory of integer version subdirectories (TF Serving layout), e.g. "
        "V/serving/tf-mnist; the newest one is served; it may be empty or missing at start",
    )
    _add_canary(p)
    p.add_argument("--model-name", help="model name in the URL: /v1/models/<name>:predict")
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help="address every socket binds; 0.0.0.0 to accept remote clients",
    )
    p.add_argument("--http-port", type=_port, help="HTTP (REST) port")
    p.add_argument(
        "--poll-interval",
        type=_positive(float),
        default=DEFAULT_POLL_INTERVAL,
        help="seconds between checks of --model-dir for a new version",
    )
    p.add_argument(
        "--request-header-timeout",
        type=_positive(float),
        default=DEFAULT_REQUEST_HEADER_TIMEOUT,
        help="seconds a request's line and headers may take to arrive, counted from the "
        "connection's opening or the request's first byte; slower clients get a 408 and the "
        "connection is closed (else a client trickling its headers holds it forever)",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        help="log one line per request (uvicorn's access log and KServe's timings); off "
        "by default, as it costs throughput",
    )
    _add_limits(p)
    # One default for each dest KServe's flags share with ours (set on the copies).
    p.set_defaults(model_name=DEFAULT_MODEL_NAME, http_port=DEFAULT_HTTP_PORT, enable_grpc=False)
    return p


def _add_canary(p: argparse.ArgumentParser) -> None:
    """A canary release beside the served version (ml/server/canary.py)."""
    p.add_argument(
        "--canary-dir",
        help="a canary release's directory (V/serving/<name>/canary): its newest version "
        "answers the share of requests its weight.json gives, beside the served one "
        "(ml/server/canary.py)",
    )
    p.add_argument(
        "--canary-elsewhere",
        action="store_true",
        help="never load a canary in this process: its share goes to the server its "
        "weight.json names (the local runtime runs each canary in a process of its own, "
        "the cluster in pods of its own)",
    )
    p.add_argument(
        "--canary-host",
        help="a host, besides loopback, that weight.json's url may name: the canary pods' "
        "Service (the predictor's manifest sets it)",
    )


def _add_limits(p: argparse.ArgumentParser) -> None:
    """The request limits (over any of them: 413)."""
    p.add_argument(
        "--max-instances",
        type=_positive(int),
        default=DEFAULT_MAX_INSTANCES,
        help="most images in one request (more: 413)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_BODY_BYTES,
        help="largest request body in bytes (more: 413, refused before it is read)",
    )
    p.add_argument(
        "--max-image-pixels",
        type=_pixel_limit,
        default=DEFAULT_MAX_IMAGE_PIXELS,
        help="largest image, as a pixel count or WIDTHxHEIGHT, checked from the PNG/JPEG "
        "header before decoding (more: 413)",
    )
    p.add_argument(
        "--max-request-pixels",
        type=_pixel_limit,
        default=DEFAULT_MAX_REQUEST_PIXELS,
        help="most pixels of all the images in one request together, as a pixel count or "
        "WIDTHxHEIGHT, summed from their headers before decoding (more: 413); the default "
        "allows e.g. 32 photos of 2 megapixels (1920x1080) in one request",
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked (exits with a usage error like argparse)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workers != 1:
        parser.error(
            f"--workers {args.workers}: ml serve runs one process (the model and its version "
            "watcher live in it); run more replicas instead"
        )
    if args.enable_grpc:
        parser.error("--enable_grpc: ml serve serves the V1 REST protocol only")
    for flag, path in (("--model-dir", args.model_dir), ("--canary-dir", args.canary_dir)):
        if path and Path(path).exists() and not Path(path).is_dir():
            parser.error(f"{flag} {path} exists and is not a directory")
    return args


def _configure_logging() -> None:
    logger = logging.getLogger("ml")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s.%(msecs)03d %(process)d %(name)s %(levelname)s %(message)s",
                datefmt="%Y-%m-%d %H:%M:%S",
            )
        )
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    adapter = load_kserve(argv)  # first: KServe reads its flags from this command line
    args = parse_args(argv)
    _configure_logging()
    from ml.server.canary import LOOPBACK
    from ml.server.watcher import VersionWatcher

    hosts = LOOPBACK | ({args.canary_host} if args.canary_host else set())
    watcher = VersionWatcher(
        args.model_dir, canary_dir=args.canary_dir, canary_here=not args.canary_elsewhere,
        canary_hosts=hosts,
    )  # fmt: skip
    model = adapter.FashionMnistModel(
        args.model_name,
        watcher,
        max_instances=args.max_instances,
        max_image_pixels=args.max_image_pixels,
        max_request_pixels=args.max_request_pixels,
    )
    server = adapter.model_server(args)
    log.info(
        "model %r from %s: HTTP on %s; polling every %gs",
        args.model_name,
        args.model_dir,
        _listen_address(args.host, server.http_port),
        args.poll_interval,
    )
    watcher.start(args.poll_interval)
    try:
        adapter.serve(server, model, args)
    finally:
        watcher.stop()
    return 0
