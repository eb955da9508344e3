# One image for every pod: ingest, TFJob workers, selection, the predictor.
# Build with `invoke build` (content-hash tag; --base local for machines without a registry).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TF_USE_LEGACY_KERAS=1 \
    TF_CPP_MIN_LOG_LEVEL=2 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Dependencies first (cached while ml/ changes). tf-keras only declares `tensorflow`,
# which would add a second, GPU-sized TensorFlow next to tensorflow-cpu: --no-deps.
# Extra CA certificates (TLS-intercepting proxies) arrive as a BuildKit secret: used for
# this step only, never written to a layer.
COPY requirements-image.txt /tmp/requirements-image.txt
RUN --mount=type=secret,id=extra_ca \
    set -eu; \
    if [ -s /run/secrets/extra_ca ]; then \
        cat /etc/ssl/certs/ca-certificates.crt /run/secrets/extra_ca > /tmp/ca-bundle.pem; \
        export PIP_CERT=/tmp/ca-bundle.pem; \
    fi; \
    python3 -m venv /opt/venv; \
    pip install --no-cache-dir --no-compile -r /tmp/requirements-image.txt; \
    pip install --no-cache-dir --no-compile --no-deps tf-keras==2.21.0; \
    rm -f /tmp/ca-bundle.pem /tmp/requirements-image.txt; \
    find /opt/venv -name '__pycache__' -type d -prune -exec rm -rf {} +

# A fixed non-root UID; the volume mount point is writable by it.
RUN useradd --uid 1000 --user-group --no-create-home --home-dir /app --shell /usr/sbin/nologin distml \
    && mkdir -p /trained_model /app \
    && chown 1000:1000 /trained_model

WORKDIR /app
COPY --chown=0:0 ml/ /app/ml/
USER 1000:1000
ENV HOME=/tmp
EXPOSE 8080
CMD ["python", "-m", "ml"]
