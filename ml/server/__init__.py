"""The model server behind ``python -m ml serve`` (``ml/server/serve.py``: its flags and ``main``).

    kserve_adapter   the served ``kserve.Model`` and KServe's REST server, bound to --host
    routes           the documented routes only (V1, the V2 protocol's read-only routes,
                     /metrics); every other URL a 404 that names them
    metrics          ASGI, outermost: every request counted and timed, in a registry each
                     server owns (Prometheus)
    v1               V1 REST bodies in, a validated batch out; the V1 answer
    v2               V2 infer requests in, a validated batch out; the model metadata
    instances        what V1 and V2 share: the limits, each image or pixel array checked
    image_header     image sizes from PNG/JPEG headers alone, nothing decoded
    errors           ClientError: a refused request, answered with its 4xx and why
    batcher          one model call for the requests that wait together
    watcher          serves the newest loadable version under the model directory
    canary           a canary version beside it, answering its weight's share of requests
    body_limit       ASGI: 413 for bodies over --max-body-bytes, before they are held
    fast_predict     ASGI: the V1 predict route answered in front of the web framework
    header_timeout   uvicorn's HTTP protocol with a deadline for request headers

Importing this package imports nothing: KServe parses ``sys.argv`` when first imported, so
``kserve_adapter`` is imported only through ``ml.server.serve.load_kserve``. Every module but
``kserve_adapter`` and ``routes`` loads neither kserve nor TensorFlow.
"""
