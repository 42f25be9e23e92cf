# syntax=docker/dockerfile:1
# GPU Ledger: build a wheel, install it with pinned dependencies into a slim runtime, run as a
# non-root user (uid 10001). One image for the service and for the node agent.
#
# Try it (the demo fleet, readable without a token, published on the host's loopback only):
#   docker build -t gpu-ledger .
#   docker run --rm -p 127.0.0.1:8000:8000 -e GPU_LEDGER_AUTH__ANONYMOUS_READ=true gpu-ledger demo
# `serve --demo` turns anonymous reads on only when it listens on loopback; in a container it
# listens on 0.0.0.0, so the demo asks for them explicitly. docker-compose.yml does the same on
# PostgreSQL.
#
# Configure it (docs/design.md, README "Configuration", examples/ has one file per setting):
#   * a mounted TOML file:  -v ./gpu-ledger.toml:/etc/gpu-ledger/config.toml:ro
#                           -e GPU_LEDGER_CONFIG=/etc/gpu-ledger/config.toml
#   * the environment, which wins over the file: GPU_LEDGER_DATABASE_URL, GPU_LEDGER_LOG_LEVEL,
#     GPU_LEDGER_<TABLE>__<KEY> for [auth], [limits], [answer_cache], and
#     GPU_LEDGER_CONNECTORS__<NAME>__<KEY> for one key of one connector (secrets from a vault).
#   * PORT (default 8000) and HOST (default 0.0.0.0): where `serve` listens; the HEALTHCHECK asks
#     the same PORT.
# Commands (deploy/docker/entrypoint.sh): `serve` (default), `demo`, or any gpu-ledger command:
#   docker run --rm -e GPU_LEDGER_DATABASE_URL=… gpu-ledger tokens create --name bi --scope read
#   docker run … gpu-ledger agent --config /etc/gpu-ledger-agent/agent.toml   (docs/agent.md)
# The default database is SQLite in the /data volume; use PostgreSQL for anything shared.

FROM python:3.11-slim AS build
WORKDIR /src
# .dockerignore keeps the venv, caches, databases and tests out of the context.
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GPU_LEDGER_DATABASE_URL=sqlite:////data/gpu-ledger.db \
    GPU_LEDGER_LOG_FORMAT=json \
    HOST=0.0.0.0 \
    PORT=8000
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/ledger ledger \
    && mkdir -p /data /etc/gpu-ledger && chown ledger:ledger /data
COPY --from=build /dist/*.whl /tmp/wheels/
# constraints.txt pins every dependency (scripts/update-constraints); .ci/run installs the same
# pins, so the image runs what CI tested. The cloud extras are for the cloud connectors, k8s for the
# node agent's pod-resources and Kubernetes API readers (docs/agent.md, loaded only when configured).
COPY constraints.txt /tmp/constraints.txt
RUN whl=$(ls /tmp/wheels/*.whl) && pip install -c /tmp/constraints.txt "${whl}[cloud,k8s]" \
    && rm -rf /tmp/wheels /tmp/constraints.txt
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/gpu-ledger-entrypoint
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
# No curl in the slim image: Python's urllib does the check (exit 1 unless /healthz answers 200),
# on the port `serve` listens on ($PORT).
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; url = 'http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'); sys.exit(0 if urllib.request.urlopen(url, timeout=4).status == 200 else 1)"]
ENTRYPOINT ["gpu-ledger-entrypoint"]
CMD ["serve"]
