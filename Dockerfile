# board-outbox: one replica of the service (`board-outbox run`), non-root, on a slim Debian
# Python. Build from the repository's root:
#
#   docker build -t board-outbox:0.1.0 .
#   docker run --rm -v "$PWD/board-outbox.toml:/etc/board-outbox/board-outbox.toml:ro" \
#     -e BOARD_OUTBOX_STORE__URI='mongodb://db:27017/?replicaSet=rs0' -p 9464:9464 board-outbox:0.1.0
#
# Pinned: the base image by its full version tag (pin its digest too where your registry
# policy asks: docs/deployment.md), every Python dependency by exact version in
# deploy/requirements.lock (installed with --no-deps, then checked whole by `pip check`).
# Linted by hadolint in ./dev.sh test (tests/test_deploy.py).

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/board-outbox
COPY deploy/requirements.lock deploy/requirements.lock
RUN /opt/board-outbox/bin/pip install --no-cache-dir --no-deps --require-virtualenv \
        -r deploy/requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY src/ src/
COPY projections/ projections/
RUN /opt/board-outbox/bin/pip install --no-cache-dir --no-deps --require-virtualenv ./ \
    && /opt/board-outbox/bin/pip check \
    && /opt/board-outbox/bin/board-outbox --version

FROM ${PYTHON_IMAGE}
ARG UID=10001
RUN groupadd --system --gid "${UID}" board-outbox \
    && useradd --system --uid "${UID}" --gid board-outbox --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin board-outbox
COPY --from=build /opt/board-outbox /opt/board-outbox
# The operator port listens on every interface of the container (kubelet probes and Prometheus
# reach a pod by its own address); a process started outside a container keeps the loopback
# default. Logs as JSON lines on stderr.
ENV PATH=/opt/board-outbox/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    BOARD_OUTBOX_SERVICE__HTTP_HOST=0.0.0.0 \
    BOARD_OUTBOX_SERVICE__LOG_FORMAT=json
USER ${UID}:${UID}
WORKDIR /opt/board-outbox
EXPOSE 9464
# liveness of the process (its loops run); /readyz is the orchestrator's readiness probe
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request as u; port = os.environ.get('BOARD_OUTBOX_SERVICE__HTTP_PORT', '9464'); sys.exit(0 if u.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["board-outbox"]
CMD ["run", "--config", "/etc/board-outbox/board-outbox.toml"]
