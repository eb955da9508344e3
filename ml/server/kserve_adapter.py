"""The adapter to KServe 0.21: the served ``kserve.Model``, and KServe's REST server bound to
``--host`` with the documented routes only, a body limit, metrics of every request and error
answers that say how to fix the request.

Import it through ``ml.server.serve.load_kserve`` (KServe parses ``sys.argv`` when first imported).

Configuration goes through KServe's public API (``kserve.ModelServer(...)``, its
``register_model``, ``setup_event_loop`` and ``register_signal_handler``, and
``RESTServer.create_application``, whose routes ``ml/server/routes.py`` then replaces with the
documented ones), except two settings of uvicorn's: KServe 0.21's ``RESTServer``
hard-codes ``host="0.0.0.0"`` in the ``uvicorn.Config`` it keeps as ``.config``, and no
argument changes it or the HTTP protocol (this server's has a request-header deadline:
``ml/server/header_timeout.py``). :func:`configure_uvicorn` is the one place that reaches
into it; ``test_rest_server_configures_uvicorn_as_given``
(``tests/ml/server/test_kserve_adapter.py``) fails if an upgrade moves it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from typing import Any

import kserve
from fastapi.responses import JSONResponse
from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING
from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady, ServerNotReady
from kserve.metrics import PREDICT_HIST_TIME
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
from kserve.protocol.rest.server import RESTServer

from ml.model.export import OUTPUT
from ml.server.batcher import Batcher
from ml.server.body_limit import BodyLimitMiddleware
from ml.server.canary import requested_version
from ml.server.canary_forward import CanaryForward
from ml.server.client_error import ClientError
from ml.server.fast_predict import FastPredictRoute
from ml.server.header_timeout import header_timeout_protocol
from ml.server.instances import DEFAULT_MAX_INSTANCES, DEFAULT_MAX_REQUEST_PIXELS, ParsedRequest
from ml.server.metrics import MetricsMiddleware, RouteTemplates, ServerMetrics, answered_by
from ml.server.routes import ROUTES, add_route_error_handler, mount_documented_routes
from ml.server.v1 import HINT, format_response, parse_request
from ml.server.v2 import parse_v2_request, signature_metadata
from ml.server.watcher import VersionWatcher

log = logging.getLogger("ml.server.serve")


class FashionMnistModel(kserve.Model):
    """The served model: validation in ``preprocess``, the signature call in ``predict``
    (concurrent requests batched: ``ml/server/batcher.py``); ``answer`` is the V1 predict route's
    direct path (``ml/server/fast_predict.py``).

    Ready (``healthy``) once the watcher has loaded a version. Its V2 model metadata
    (``get_input_types``, ``get_output_types``) is that of the served version's signatures.
    """

    def __init__(self, name: str, watcher: VersionWatcher, **limits: int) -> None:
        super().__init__(name)
        self.watcher = watcher
        self.limits = limits  # max_instances, max_image_pixels, max_request_pixels
        self.batcher = Batcher(
            watcher.predict,
            max_instances=limits.get("max_instances", DEFAULT_MAX_INSTANCES),
            max_pixels=limits.get("max_request_pixels", DEFAULT_MAX_REQUEST_PIXELS),
        )

    async def healthy(self) -> bool:
        return self.watcher.current is not None

    def served_version(self) -> int | None:
        current = self.watcher.current
        return current.version if current is not None else None

    def canary_weight(self) -> tuple[int, int, int] | None:
        """(version, percent of requests, percent mirrored) of a canary, else None."""
        canary = self.watcher.canary
        if canary is None or canary.current is None:
            return None
        return canary.current.version, canary.split.weight, canary.mirror.weight

    def not_ready_reason(self) -> str:
        return f"No version loaded yet from {self.watcher.model_dir} (waiting for one)."

    def get_input_types(self) -> list[dict]:
        return signature_metadata(self._served().signatures)[0]

    def get_output_types(self) -> list[dict]:
        return signature_metadata(self._served().signatures)[1]

    def _served(self) -> Any:
        """The version served now; ModelNotReady (503, saying why) before one loads."""
        current = self.watcher.current
        if current is None:
            raise ModelNotReady(self.name)
        return current

    def preprocess(  # type: ignore[override]  # sync; returns predict's input, as KServe allows
        self, payload: Any, headers: Any = None
    ) -> ParsedRequest:
        if isinstance(payload, InferRequest):  # REST /v2/models/<name>/infer
            return parse_v2_request(payload, **self.limits)
        return parse_request(payload, **self.limits)

    async def predict(  # type: ignore[override]  # takes preprocess's result: KServe passes it on
        self, payload: ParsedRequest, headers: Any = None
    ) -> Any:
        target = self.watcher.route(requested_version())  # the stable, or the canary
        if target is not None:
            answered_by(target.version)  # its failures count against it too
        version, probabilities = await self.batcher.predict(
            payload.signature_name, payload.inputs, payload.pixels, target
        )
        answered_by(version)
        if payload.form == "v2":  # as JSON or binary data, as asked (KServe's to_rest)
            output = InferOutput(OUTPUT, list(probabilities.shape), "FP32", probabilities)
            return InferResponse(
                response_id=payload.request_id, model_name=self.name, infer_outputs=[output],
                model_version=str(version), use_binary_outputs=payload.binary_outputs,
                requested_outputs=payload.requested_outputs,
            )  # fmt: skip
        return format_response(
            probabilities,
            version,
            form=payload.form,
            return_class_names=payload.return_class_names,
        )

    async def answer(self, body: bytes) -> tuple[int, Any]:
        """The V1 predict route without the web framework: (status, JSON object), the same
        answers as KServe's route with this server's error handlers."""
        if not await self.healthy():
            return 503, {"error": f"{ModelNotReady(self.name)} {self.not_ready_reason()}"}
        started = time.perf_counter()
        try:
            content = await self.predict(self.preprocess(body))
        except ClientError as e:
            log.info("rejected a request (%d): %s", e.status, e.message)
            return e.status, {"error": e.message}
        except Exception as e:  # as KServe's generic handler answers it
            log.exception("the predict route failed")
            return 500, {"error": f"{type(e).__name__} : {e}"}
        PREDICT_HIST_TIME.labels(model_name=self.name).observe(time.perf_counter() - started)
        return 200, content

    def stop(self) -> None:
        self.watcher.stop()
        super().stop()


def configure_uvicorn(
    server: RESTServer, host: str, request_header_timeout: float, metrics: ServerMetrics
) -> None:
    """Make ``server`` listen on ``host`` with a deadline for request headers (the requests
    its protocol refuses counted in ``metrics``): the one private detail of KServe touched
    here (its ``uvicorn.Config``, created with ``host="0.0.0.0"`` and uvicorn's own HTTP
    protocol, and read when serving)."""
    server.config.host = host
    server.config.http = header_timeout_protocol(request_header_timeout, metrics.refused_early)


class BoundRESTServer(RESTServer):
    """KServe's REST server on ``host``: the documented routes only (``ml/server/routes.py``),
    a deadline for request headers, a body limit, this server's error answers, and its
    metrics (``ml/server/metrics.py``: ``.metrics``, a registry of its own)."""

    def __init__(
        self,
        *a: Any,
        host: str,
        max_body_bytes: int,
        model: FashionMnistModel,
        request_header_timeout: float,
        docs: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(*a, **kw)
        self.metrics = ServerMetrics(model.name, model.served_version, model.canary_weight)
        model.batcher.on_call = self.metrics.observe_batch
        configure_uvicorn(self, host, request_header_timeout, self.metrics)
        self.max_body_bytes = max_body_bytes
        self.model = model
        self.docs = docs

    def create_application(self) -> None:
        super().create_application()  # KServe's middlewares, endpoints and error handlers
        app = kserve.model_server.app  # the FastAPI app create_application just set up
        model = self.model
        mount_documented_routes(
            app,
            self.dataplane,
            docs=self.docs,
            exposition=self.metrics.exposition,
            served_version=model.served_version,
        )
        app.add_middleware(FastPredictRoute, model_name=model.name, answer=model.answer)
        # Outside the direct route: a canary in its own process takes its share first.
        canary = lambda: model.watcher.canary  # noqa: E731
        app.add_middleware(
            CanaryForward, model_name=model.name, canary=canary, metrics=self.metrics
        )
        app.add_middleware(BodyLimitMiddleware, max_bytes=self.max_body_bytes)
        routes = RouteTemplates(((method, path) for method, path, _ in ROUTES), model.name)
        app.add_middleware(MetricsMiddleware, metrics=self.metrics, routes=routes)  # outermost
        add_error_handlers(app, self.dataplane.model_registry)
        add_route_error_handler(app, model.name, model.served_version)


def add_error_handlers(app: Any, registry: Any) -> None:
    """Answers that say what is wrong and how to fix it (replacing KServe's for these)."""

    async def client_error(_: Any, exc: ClientError) -> JSONResponse:
        log.info("rejected a request (%d): %s", exc.status, exc.message)
        return JSONResponse(status_code=exc.status, content={"error": exc.message})

    async def invalid_input(_: Any, exc: InvalidInput) -> JSONResponse:
        # kserve raises this when the body is not JSON (Content-Type: application/json)
        log.info("rejected a request (400): %s", exc)
        return JSONResponse(status_code=400, content={"error": f"{exc}. {HINT}"})

    async def not_found(_: Any, exc: ModelNotFound) -> JSONResponse:
        served = ", ".join(registry.get_models()) or "(none)"
        return JSONResponse(
            status_code=404, content={"error": f"{exc} This server serves: {served}."}
        )

    async def not_ready(_: Any, exc: ModelNotReady) -> JSONResponse:
        model = registry.get_model(exc.model_name)
        detail = model.not_ready_reason() if hasattr(model, "not_ready_reason") else ""
        return JSONResponse(status_code=503, content={"error": f"{exc} {detail}".strip()})

    async def server_not_ready(_: Any, exc: ServerNotReady) -> JSONResponse:
        # KServe's handler logs a traceback for each: a probe before the first version
        return JSONResponse(status_code=503, content={"error": str(exc)})

    app.add_exception_handler(ClientError, client_error)
    app.add_exception_handler(InvalidInput, invalid_input)
    app.add_exception_handler(ModelNotFound, not_found)
    app.add_exception_handler(ModelNotReady, not_ready)
    app.add_exception_handler(ServerNotReady, server_not_ready)


def model_server(args: argparse.Namespace) -> kserve.ModelServer:
    """KServe's ModelServer from the parsed command line (KServe's own flags included)."""
    return kserve.ModelServer(
        http_port=args.http_port,
        workers=1,
        enable_grpc=False,
        max_asyncio_workers=args.max_asyncio_workers,
        enable_docs_url=args.enable_docs_url,
        enable_latency_logging=args.enable_latency_logging,
        access_log_format=args.access_log_format,
        event_loop=args.event_loop,
        timeout_keep_alive=args.timeout_keep_alive,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
    )


def request_logs(on: bool) -> None:
    """One line per request (uvicorn's access log, KServe's timings) only when asked: they
    cost a few percent of throughput (benchmarks/results/serving-attempts.md)."""
    level = logging.INFO if on else logging.WARNING
    for name in ("uvicorn.access", "kserve.trace"):
        logging.getLogger(name).setLevel(level)


def rest_server(
    server: kserve.ModelServer, model: FashionMnistModel, args: argparse.Namespace
) -> BoundRESTServer:
    """KServe's REST server for ``model``, registered with ``server``; its app is built by
    ``create_application`` (which ``start`` calls).

    Unlike ``ModelServer.start``, the model is registered before it is ready (``start``
    refuses that): readiness answers 503 until the watcher loads a version.
    """
    server.register_model(model)
    model.enable_latency_logging = server.enable_latency_logging
    return BoundRESTServer(
        FASTAPI_APP_IMPORT_STRING,
        server.dataplane,
        server.model_repository_extension,
        server.http_port,
        host=args.host,
        max_body_bytes=args.max_body_bytes,
        model=model,
        docs=server.enable_docs_url,
        request_header_timeout=args.request_header_timeout,
        access_log_format=server.access_log_format,
        grace_period=server.grace_period,
        event_loop=server.event_loop,
        timeout_keep_alive=server.timeout_keep_alive,
        ssl_certfile=server.ssl_certfile,
        ssl_keyfile=server.ssl_keyfile,
    )


def serve(server: kserve.ModelServer, model: FashionMnistModel, args: argparse.Namespace) -> None:
    """Run the REST server until a signal stops it."""
    rest = rest_server(server, model, args)
    request_logs(args.access_log)
    server.setup_event_loop()
    server.register_signal_handler()
    asyncio.run(rest.start())
