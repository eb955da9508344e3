"""The routes ``ml.serve`` answers, the documented ones only, and its answer for every other
URL.

KServe's ``RESTServer.create_application`` mounts every route of its protocols, among them
the model repository extension: one unauthenticated ``POST
/v2/repository/models/<name>/unload`` unregistered the model and stopped its version
watcher, so readiness answered 404 from then on. :func:`mount_documented_routes` replaces
KServe's routes with :data:`ROUTES`, served by KServe's own endpoint handlers; any other URL
gets a 404 (405: a served path with another method) naming the routes that are served, and
a V2 URL naming a model version a 404 saying which version is served and the URL without it.
V2 infer bodies are decoded in one place, :func:`decode_v2_body`: any body that is not a V2
request is a 400 saying why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from kserve.constants.constants import INFERENCE_CONTENT_LENGTH_HEADER
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.infer_type import InferRequest
from kserve.protocol.rest.v1_endpoints import V1Endpoints
from kserve.protocol.rest.v2_datamodels import InferenceRequest
from kserve.protocol.rest.v2_endpoints import V2Endpoints
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from ml.server.client_error import ClientError
from ml.server.v2 import V2_HINT

#: (method, path, what it is): every route this server answers (docs/serving.md, "Serving").
ROUTES = (
    ("GET", "/", "liveness"),
    ("GET", "/v1/models/{model_name}", "readiness"),
    ("POST", "/v1/models/{model_name}:predict", "V1 predict"),
    ("GET", "/v2/models/{model_name}/ready", "V2 readiness"),
    ("POST", "/v2/models/{model_name}/infer", "V2 infer"),
)
#: FastAPI's API pages, served only with KServe's ``--enable_docs_url true``.
DOC_PATHS = ("/openapi.json", "/docs", "/docs/oauth2-redirect")


def mount_documented_routes(app: FastAPI, dataplane: DataPlane, *, docs: bool) -> None:
    """Replace every route of ``app`` with :data:`ROUTES` (and FastAPI's pages if ``docs``).

    Called after KServe's ``create_application``, before the app answers a request.
    """
    app.router.routes[:] = [
        route for route in app.router.routes if docs and getattr(route, "path", "") in DOC_PATHS
    ]
    handlers = _handlers(dataplane)
    for method, path, _ in ROUTES:
        app.add_api_route(path, handlers[path], methods=[method], response_model=None)


def _handlers(dataplane: DataPlane) -> dict[str, Any]:
    """path -> KServe's handler for it. KServe's V2 handlers also take a ``model_version``
    (a query parameter on these paths) and answer 501 for any: it is left out here."""
    v1, v2 = V1Endpoints(dataplane), V2Endpoints(dataplane)

    async def v2_ready(model_name: str) -> Any:
        return await v2.model_ready(model_name)

    return {
        "/": dataplane.live,
        "/v1/models/{model_name}": v1.model_ready,
        "/v1/models/{model_name}:predict": v1.predict,
        "/v2/models/{model_name}/ready": v2_ready,
        "/v2/models/{model_name}/infer": _v2_infer(v2),
    }


def _v2_infer(v2: V2Endpoints) -> Any:
    """KServe's V2 infer handler, given the body as decoded by :func:`decode_v2_body` (the
    handler takes an ``InferRequest`` as it is)."""

    async def v2_infer(raw_request: Request, raw_response: Response, model_name: str) -> Any:
        body = decode_v2_body(await raw_request.body(), raw_request.headers, model_name)
        return await v2.infer(raw_request, raw_response, model_name, body)

    return v2_infer


def decode_v2_body(body: bytes, headers: Mapping[str, str], model_name: str) -> InferRequest:
    """A V2 infer request body: JSON, or with KServe's binary data extension when the
    ``Inference-Header-Content-Length`` header says how long its JSON part is.

    Raises:
        ClientError: 400, for any body that is not such a request, saying why.
    """
    try:
        if INFERENCE_CONTENT_LENGTH_HEADER in headers:
            length = int(headers[INFERENCE_CONTENT_LENGTH_HEADER])
            return InferRequest.from_bytes(body, length, model_name)
        return InferRequest.from_inference_request(
            InferenceRequest.model_validate_json(body), model_name
        )
    except ValidationError as e:
        problems = [f"{'.'.join(map(str, p['loc'])) or 'body'}: {p['msg']}" for p in e.errors()]
        reason = "; ".join(problems[:3]) + (f"; {len(problems) - 3} more" if problems[3:] else "")
    except Exception as e:  # from_bytes indexes the client's JSON and data unchecked
        reason = f"{type(e).__name__}: {e}"
    raise ClientError(400, f"the body is not a V2 inference request ({reason}); {V2_HINT}")


def served_routes(model_name: str) -> str:
    """The served routes for ``model_name``, as a client would type them."""
    return "; ".join(
        f"{method} {path.format(model_name=model_name)} ({what})" for method, path, what in ROUTES
    )


def versioned_url_message(path: str, model_name: str, version: int | None) -> str | None:
    """What to say about a V2 infer or ready URL naming a model version, else None.

    Such URLs answer 404 (not KServe's 501): the server serves one version, the newest
    published, and a version in the URL cannot be honoured, as TF Serving answers 404 for
    a version it does not serve.
    """
    match = _VERSIONED.fullmatch(path)
    if not match:
        return None
    name, named, rest = match["name"], match["version"], match["rest"]
    now = f"now version {version}" if version is not None else "none loaded yet"
    return (
        f"versions are not addressable: this server serves only the newest published version "
        f"of {model_name} ({now}); send the request without /versions/{named}: "
        f"/v2/models/{name}{rest} (the answer's model_version says which version answered)"
    )


_VERSIONED = re.compile(
    r"/v2/models/(?P<name>[^/]+)/versions/(?P<version>[^/]+)(?P<rest>/infer|/ready)"
)


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

    app.add_exception_handler(HTTPException, route_error)
