# syntax=docker/dockerfile:1
# GPU Ledger: build a wheel, install it into a slim runtime, run as a non-root user.

FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir build
# .dockerignore keeps the venv, caches, databases and tests out of the context.
COPY . .
RUN python -m build --wheel --outdir /dist

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GPU_LEDGER_DATABASE_URL=sqlite:////data/gpu-ledger.db \
    GPU_LEDGER_LOG_FORMAT=json
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/ledger ledger \
    && mkdir -p /data && chown ledger:ledger /data
COPY --from=build /dist/*.whl /tmp/wheels/
# The cloud extras (boto3, google-cloud-monitoring, azure-monitor-query…) for the cloud connectors.
RUN whl=$(ls /tmp/wheels/*.whl) && pip install "${whl}[cloud]" && rm -rf /tmp/wheels
USER ledger
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
# No curl in the slim image: Python's urllib does the check (exit 1 unless /healthz answers 200).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"]
CMD ["gpu-ledger", "serve", "--host", "0.0.0.0", "--port", "8000"]
