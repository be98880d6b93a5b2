# syntax=docker/dockerfile:1
#
# GPU-memory estimator service image (see deploy/README.md).
#
# Two stages: "build" installs the project and its dependencies into a virtual
# environment at /opt/venv; "runtime" copies only that venv onto a fresh slim
# base. No compiler, pip cache, build tree or pip itself reaches the final image.
#
# Bump the base deliberately (same tag in both stages); pin a digest as well in
# a registry mirror if your policy needs one: python:3.11.14-slim-trixie@sha256:...

############################## build ##############################
FROM python:3.11.14-slim-trixie AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# The venv gets no pip of its own: the base image's pip installs into it, so
# the runtime image ends up without an installer.
RUN python -m venv --without-pip /opt/venv

COPY pyproject.toml README.md ./
COPY service ./service

# A regular (non-editable) install: the package and its data files (GPU and
# model catalogs) land in the venv's site-packages, compiled to bytecode there
# so the read-only container never needs to write .pyc files.
RUN pip --python /opt/venv/bin/python install --no-cache-dir . \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

############################# runtime #############################
FROM python:3.11.14-slim-trixie AS runtime

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
# FORWARDED_ALLOW_IPS is uvicorn's own: which peers may set X-Forwarded-*; "*"
# because only the ingress/mesh can reach the pod (see the NetworkPolicy).
# Keep-alive outlasts the usual 60 s idle timeout of L7 proxies, so the proxy,
# not uvicorn, closes idle upstream connections (no race on a reused socket).
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LLMMEM_HOST=0.0.0.0 \
    LLMMEM_PORT=8000 \
    LLMMEM_LOG_LEVEL=info \
    LLMMEM_MAX_BODY_BYTES=1048576 \
    LLMMEM_DOCS_ENABLED=true \
    LLMMEM_TIMEOUT_KEEP_ALIVE_S=75 \
    LLMMEM_GRACEFUL_SHUTDOWN_S=20 \
    FORWARDED_ALLOW_IPS="*"

WORKDIR /app
USER 10001:10001
EXPOSE 8000

# `python -m service` is uvicorn serving `service.app:create_app` (factory)
# with the settings above: one worker per container (scale with replicas),
# proxy headers on, and on SIGTERM it stops accepting, lets in-flight requests
# finish for up to LLMMEM_GRACEFUL_SHUTDOWN_S seconds, then exits 0.
# Exec form, so uvicorn is PID 1 and receives the SIGTERM itself.
ENTRYPOINT ["/opt/venv/bin/python", "-m", "service"]
