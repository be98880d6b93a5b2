# syntax=docker/dockerfile:1
#
# GPU-memory estimator service image (see deploy/README.md).
#
# Two stages: "build" installs the locked dependencies and the project into a
# virtual environment at /opt/venv; "runtime" copies only that venv onto a fresh
# slim base. No compiler, pip cache, build tool or pip itself reaches the image.
#
# The base is pinned by tag and by digest (the multi-platform index, so amd64
# and arm64 builds both resolve it); bump both together with
# `make base-image-digest` (deploy/README.md).

############################## build ##############################
FROM python:3.11.14-slim-trixie@sha256:193fdd0bbcb3d2ae612bd6cc3548d2f7c78d65b549fcaa8af75624c47474444d AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# Every runtime dependency at the version and hashes of requirements.lock
# (`make lock`); --no-deps because the lock already lists the whole closure.
# The venv gets no pip of its own: the base image's pip installs into it, so
# the runtime image ends up without an installer.
COPY requirements.lock requirements-build.lock ./
RUN python -m venv --without-pip /opt/venv \
    && pip --python /opt/venv/bin/python install --no-cache-dir --require-hashes --no-deps \
        -r requirements.lock \
    && pip install --no-cache-dir --require-hashes --no-deps -r requirements-build.lock

COPY pyproject.toml README.md ./
COPY service ./service

# The project itself, built into a wheel with the locked setuptools (no build
# isolation: nothing unpinned is fetched) and installed without dependencies;
# its data files (GPU and model catalogs) land in the venv's site-packages,
# compiled to bytecode there so the read-only container never writes .pyc files.
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /tmp/wheels . \
    && pip --python /opt/venv/bin/python install --no-cache-dir --no-deps /tmp/wheels/*.whl \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

############################# runtime #############################
FROM python:3.11.14-slim-trixie@sha256:193fdd0bbcb3d2ae612bd6cc3548d2f7c78d65b549fcaa8af75624c47474444d AS runtime

# A fixed numeric UID/GID (10001) so Kubernetes can verify runAsNonRoot; the
# securityContext in deploy/k8s names the same numbers.
RUN groupadd --system --gid 10001 llmmem \
    && useradd --system --uid 10001 --gid 10001 \
        --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin llmmem

COPY --from=build /opt/venv /opt/venv

# Service settings (pydantic-settings, prefix LLMMEM_, see service/settings.py
# and the README). Only values that differ from the code's defaults for a
# container are set here; deploy/k8s sets the same ones in its ConfigMap.
# The catalog paths stay unset so the catalogs packaged in the image are used.
# No proxy is trusted to set X-Forwarded-*: LLMMEM_FORWARDED_ALLOW_IPS is left
# at its default (none); a deployment names its own proxies.
# Keep-alive outlasts the usual 60 s idle timeout of L7 proxies, so the proxy,
# not the server, closes idle upstream connections (no race on a reused socket).
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LLMMEM_HOST=0.0.0.0 \
    LLMMEM_PORT=8000 \
    LLMMEM_LOG_LEVEL=info \
    LLMMEM_MAX_BODY_BYTES=1048576 \
    LLMMEM_DOCS_ENABLED=true \
    LLMMEM_TIMEOUT_KEEP_ALIVE_S=75 \
    LLMMEM_GRACEFUL_SHUTDOWN_S=20

WORKDIR /app
USER 10001:10001
EXPOSE 8000

# `python -m service` runs uvicorn (service/api/server.py) with the settings
# above: one worker per container (scale with replicas), request heads bounded
# in size and time, and on SIGTERM it stops accepting, lets in-flight requests
# finish for up to LLMMEM_GRACEFUL_SHUTDOWN_S seconds, then exits 0.
# Exec form, so the server is PID 1 and receives the SIGTERM itself.
ENTRYPOINT ["/opt/venv/bin/python", "-m", "service"]
