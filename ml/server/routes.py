"""The routes ``ml.server.serve`` answers, the documented ones only, and its answer for every other
URL.

KServe's ``RESTServer.create_application`` mounts every route of its protocols, among them
the model repository extension: one unauthenticated ``POST
/v2/repository/models/<name>/unload`` unregistered the model and stopped its version
watcher, so readiness answered 404 from then on. :func:`mount_documented_routes` replaces
KServe's routes with :data:`ROUTES`, served by KServe's own endpoint handlers: V1 predict
and readiness, and the Open Inference Protocol's (KServe V2 REST) required routes, none of
which changes anything, plus ``GET /metrics`` (``ml/server/metrics.py``). A V2 infer may
name the loaded version to answer it (the stable's, or a canary's during a release). Any
other URL gets a 404 (405: a served path with another method) naming the routes that are
served, and a V2 ready or metadata URL naming a version a 404 giving the URL without it.
V2 infer bodies are decoded in one place, :func:`decode_v2_body`: any body that is not a V2
request is a 400 saying why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from kserve.constants.constants import INFERENCE_CONTENT_LENGTH_HEADER
from kserve.errors import ServerNotReady
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.infer_type import InferInput, InferRequest, RequestedOutput
from kserve.protocol.rest.v1_endpoints import V1Endpoints
from kserve.protocol.rest.v2_datamodels import InferenceRequest, RequestInput
from kserve.protocol.rest.v2_endpoints import V2Endpoints
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from ml.server.canary import request_version
from ml.server.client_error import ClientError
from ml.server.v2 import V2_HINT

#: A V2 infer that names the version to answer: the protocol's route, served for the versions
#: loaded (the stable and, during a canary release, the canary: ``ml/server/canary.py``).
VERSIONED_INFER = "/v2/models/{model_name}/versions/{model_version}/infer"
#: (method, path, what it is): every route this server answers (docs/serving.md, "Serving").
ROUTES = (
    ("GET", "/", "liveness"),
    ("GET", "/v1/models/{model_name}", "readiness"),
    ("POST", "/v1/models/{model_name}:predict", "V1 predict"),
    ("GET", "/v2/health/live", "V2 liveness"),
    ("GET", "/v2/health/ready", "V2 readiness"),
    ("GET", "/v2", "V2 server metadata"),
    ("GET", "/v2/models/{model_name}", "V2 model metadata"),
    ("GET", "/v2/models/{model_name}/ready", "V2 model readiness"),
    ("POST", "/v2/models/{model_name}/infer", "V2 infer"),
    ("POST", VERSIONED_INFER, "V2 infer by one loaded version (the stable's or the canary's)"),
    ("GET", "/metrics", "Prometheus metrics"),
)
#: FastAPI's API pages, served only with KServe's ``--enable_docs_url true``.
DOC_PATHS = ("/openapi.json", "/docs", "/docs/oauth2-redirect")
#: The V2 protocol extensions served (``GET /v2``): binary tensors in and out. KServe's own
#: answer names its model repository extension, whose routes this server does not serve.
EXTENSIONS = ("binary_tensor_data",)

#: ``exposition(accept header) -> (body, content type)``: a metrics scrape.
Exposition = Callable[[str | None], tuple[bytes, str]]


def mount_documented_routes(
    app: FastAPI,
    dataplane: DataPlane,
    *,
    docs: bool,
    exposition: Exposition,
    served_version: Callable[[], int | None],
) -> None:
    """Replace every route of ``app`` with :data:`ROUTES` (and FastAPI's pages if ``docs``);
    ``GET /metrics`` answers ``exposition``, the V2 model metadata names ``served_version``.

    Called after KServe's ``create_application``, before the app answers a request.
    """
    app.router.routes[:] = [
        route for route in app.router.routes if docs and getattr(route, "path", "") in DOC_PATHS
    ]
    handlers = {
        **_v1_handlers(dataplane),
        **_v2_handlers(dataplane, served_version),
        "/metrics": _metrics(exposition),
    }
    for method, path, _ in ROUTES:
        app.add_api_route(path, handlers[path], methods=[method], response_model=None)


def _v1_handlers(dataplane: DataPlane) -> dict[str, Any]:
    v1 = V1Endpoints(dataplane)
    return {
        "/": dataplane.live,
        "/v1/models/{model_name}": v1.model_ready,
        "/v1/models/{model_name}:predict": v1.predict,
    }


def _v2_handlers(dataplane: DataPlane, served_version: Callable[[], int | None]) -> dict[str, Any]:
    """path -> KServe's V2 handler for it. KServe's V2 model handlers also take a
    ``model_version`` (a query parameter on these paths) and answer 501 for any: it is left
    out here."""
    v2 = V2Endpoints(dataplane)

    async def server_ready() -> Any:
        await _every_model_ready(dataplane, dataplane.model_registry.get_models())
        return await v2.ready()

    async def server_metadata() -> Any:
        answer = await v2.metadata()
        answer.extensions = list(EXTENSIONS)
        return answer

    async def model_metadata(model_name: str) -> Any:
        answer = await v2.model_metadata(model_name)  # 404 unknown, 503 before a version loads
        version = served_version()
        answer.versions = [] if version is None else [str(version)]
        return answer

    async def model_ready(model_name: str) -> Any:
        return await v2.model_ready(model_name)

    return {
        "/v2/health/live": v2.live,
        "/v2/health/ready": server_ready,
        "/v2": server_metadata,
        "/v2/models/{model_name}": model_metadata,
        "/v2/models/{model_name}/ready": model_ready,
        "/v2/models/{model_name}/infer": _v2_infer(v2),
        VERSIONED_INFER: _v2_versioned_infer(v2),
    }


async def _every_model_ready(dataplane: DataPlane, names: Iterable[str]) -> None:
    """The V2 server readiness (the protocol's: every model ready; KServe's own answers
    ready with no model loaded).

    Raises:
        ServerNotReady: 503, naming the model and why (its ``not_ready_reason``).
    """
    for name in names:
        if not await dataplane.model_ready(name):
            model = dataplane.model_registry.get_model(name)
            reason = getattr(model, "not_ready_reason", lambda: "")()
            raise ServerNotReady(f"Model {name} is not ready. {reason}".strip())


def _metrics(exposition: Exposition) -> Any:
    async def metrics(request: Request) -> Response:
        body, content_type = exposition(request.headers.get("accept"))
        return Response(body, headers={"content-type": content_type})

    return metrics


def _v2_infer(v2: V2Endpoints) -> Any:
    """KServe's V2 infer handler, given the body as decoded by :func:`decode_v2_body` (the
    handler takes an ``InferRequest`` as it is)."""

    async def v2_infer(raw_request: Request, raw_response: Response, model_name: str) -> Any:
        body = decode_v2_body(await raw_request.body(), raw_request.headers, model_name)
        return await v2.infer(
            raw_request,
            raw_response,
            model_name,
            body,  # type: ignore[arg-type]  # KServe's decode takes an InferRequest as is
        )

    return v2_infer


def _v2_versioned_infer(v2: V2Endpoints) -> Any:
    """:func:`_v2_infer`, answered by the version the URL names (404 if it is not loaded)."""
    infer = _v2_infer(v2)

    async def v2_versioned_infer(
        raw_request: Request, raw_response: Response, model_name: str, model_version: str
    ) -> Any:
        if not (model_version.isascii() and model_version.isdigit()):
            raise ClientError(404, f"version {model_version!r} is not a version number")
        request_version(int(model_version))
        return await infer(raw_request, raw_response, model_name)

    return v2_versioned_infer


def decode_v2_body(body: bytes, headers: Mapping[str, str], model_name: str) -> InferRequest:
    """A V2 infer request body: JSON, or with the binary data extension when the
    ``Inference-Header-Content-Length`` header says how long its JSON part is.

    Raises:
        ClientError: 400, for any body that is not such a request, saying why.
    """
    try:
        if INFERENCE_CONTENT_LENGTH_HEADER in headers:
            length = int(headers[INFERENCE_CONTENT_LENGTH_HEADER])
            return _binary_request(body, length, model_name)
        return InferRequest.from_inference_request(
            InferenceRequest.model_validate_json(body), model_name
        )
    except ValidationError as e:
        problems = [f"{'.'.join(map(str, p['loc'])) or 'body'}: {p['msg']}" for p in e.errors()]
        reason = "; ".join(problems[:3]) + (f"; {len(problems) - 3} more" if problems[3:] else "")
    except Exception as e:  # from_bytes indexes the client's JSON and data unchecked
        reason = f"{type(e).__name__}: {e}"
    raise ClientError(400, f"the body is not a V2 inference request ({reason}); {V2_HINT}")


class _BinaryInput(RequestInput):
    # None: its bytes follow the JSON part (binary_data_size). KServe's field is required.
    data: list | None = None  # type: ignore[assignment]  # optional here, on purpose


class _BinaryHeader(InferenceRequest):
    inputs: list[_BinaryInput]  # type: ignore[assignment]  # the inputs above


def _binary_request(body: bytes, length: int, model_name: str) -> InferRequest:
    """A request in the binary data extension: its JSON part (``length`` bytes), then the
    bytes of each input whose ``binary_data_size`` says how many, in order.

    Read as KServe's ``InferRequest.from_bytes`` reads it, except that binary inputs stay
    bytes: from_bytes makes each BYTES element UTF-8 text, which an image file is not
    (tritonclient's binary BYTES inputs were refused), and FP32 data a list of floats.

    Raises:
        ValueError, ValidationError: not such a request (the caller says why, 400).
    """
    if not 0 <= length <= len(body):
        raise ValueError(
            f"Inference-Header-Content-Length is {length}; the body is {len(body)} bytes"
        )
    header = _BinaryHeader.model_validate_json(body[:length])
    inputs: list[InferInput] = []
    raw: list[bytes | None] = []  # None: the input's data is in the JSON part
    start = length
    for tensor in header.inputs:
        name, shape, datatype = tensor.name, tensor.shape, tensor.datatype
        parameters = tensor.parameters or {}
        if tensor.data is not None:
            inputs.append(InferInput(name, shape, datatype, tensor.data, parameters))
            raw.append(None)
            continue
        size = parameters.get("binary_data_size")
        if type(size) is not int or size < 0:
            raise ValueError(f"input {tensor.name!r} has no data and no binary_data_size")
        inputs.append(InferInput(name, shape, datatype, parameters=parameters))
        raw.append(body[start : start + size])
        start += size
    if start != len(body):
        raise ValueError(
            f"the binary data is {len(body) - length} bytes; the inputs' binary_data_size "
            f"add up to {start - length}"
        )
    outputs = [RequestedOutput(o.name, o.parameters or {}) for o in header.outputs or ()]
    return InferRequest(
        model_name, inputs, header.id, raw_inputs=raw, parameters=header.parameters,
        request_outputs=outputs or None,
    )  # fmt: skip


def served_routes(model_name: str) -> str:
    """The served routes for ``model_name``, as a client would type them."""
    return "; ".join(
        f"{method} {path.format(model_name=model_name, model_version='<N>')} ({what})"
        for method, path, what in ROUTES
    )


def versioned_url_message(path: str, model_name: str, version: int | None) -> str | None:
    """What to say about a V2 ready or metadata URL naming a model version, else None.

    Such URLs answer 404 (not KServe's 501): readiness and metadata are the model's, whatever
    version answers; only infer takes a version (:data:`VERSIONED_INFER`).
    """
    match = _VERSIONED.fullmatch(path)
    if not match:
        return None
    name, named, rest = match["name"], match["version"], match["rest"]
    now = f"now version {version}" if version is not None else "none loaded yet"
    return (
        f"only infer is addressable by version; readiness and metadata are the model's: "
        f"send the request without /versions/{named}: /v2/models/{name}{rest} "
        f"(the served version of {model_name} is {now})"
    )


_VERSIONED = re.compile(r"/v2/models/(?P<name>[^/]+)/versions/(?P<version>[^/]+)(?P<rest>/ready|)")


def add_route_error_handler(
    app: FastAPI, model_name: str, served_version: Callable[[], int | None]
) -> None:
    """404 and 405 (and the framework's other HTTP errors) as ``{"error": ...}`` that says
    what is served."""

    async def route_error(request: Any, exc: HTTPException) -> JSONResponse:
        where = f"{request.method} {request.url.path}"
        versioned = versioned_url_message(request.url.path, model_name, served_version())
        if exc.status_code == 404 and versioned:
            message = f"{where}: {versioned}"
        elif exc.status_code == 404:
            message = f"{where}: no such route; this server answers {served_routes(model_name)}"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"{where}: method not allowed; use {allowed}"
        else:
            message = f"{where}: {exc.detail}"
        return JSONResponse(
            status_code=exc.status_code, content={"error": message}, headers=exc.headers
        )

    app.add_exception_handler(
        HTTPException,
        route_error,  # type: ignore[arg-type]  # Starlette calls it with HTTPExceptions only
    )
