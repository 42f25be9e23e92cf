"""The ``[limits]`` settings table: what one caller or one request may cost the service.

Each limit has its own error code, so a client (or the person reading its log) knows which one
it hit and what to change::

    [limits]
    max_body_b = 1048576             # POST /graphql body (bytes), chunked bodies too → 413 PAYLOAD_TOO_LARGE
    max_push_body_b = 67108864       # POST /api/v1/batches body (bytes) → 413 {"error": …}
    max_depth = 12                   # fields nested below a root field (root = 0) → QUERY_TOO_DEEP
    max_aliases = 30                 # aliased fields in one document → TOO_MANY_ALIASES
    max_tokens = 2000                # lexical tokens (and comments) of a document → TOO_MANY_TOKENS
    request_timeout_s = 30.0         # a GraphQL request's time; SQL still running then → QUERY_TIMEOUT
    max_concurrent_queries = 8       # GraphQL operations executing at once (0: no cap) → 503 OVERLOADED
    queue_wait_s = 0.5               # how long a request waits for one of those slots before the 503
    rate_per_minute = 600            # GraphQL requests per caller per minute (0: no limit) → 429 RATE_LIMITED
    rate_burst = 100                 # requests a caller may send at once before the rate applies

The time limit starts when a request gets its query slot; each statement is given the time left
and cancelled by the database when it runs out (PostgreSQL ``statement_timeout``, a SQLite
progress handler). Parsing and validation are bounded by ``max_tokens`` instead.

Each key can be set from the environment too: ``GPU_LEDGER_LIMITS__<KEY>`` (e.g.
``GPU_LEDGER_LIMITS__MAX_DEPTH=8``), which wins over the file.

Why ``max_tokens`` is 2,000: graphql-core's overlapping-fields validation is quadratic in the
fields of a selection; at 4,000 tokens one document costs about a second of CPU (measured: 300
copies of ``devices(first: 1) { edges { cursor } }``, 1.1 s), at 2,000 about a quarter of that.
Real queries, GraphiQL's introspection included, stay well under it.

The rate limit and the concurrency cap live in the memory of one process: behind a load balancer
with N replicas a caller gets N times the rate. Parsing and validation run in worker threads, so a
huge document costs CPU but never stalls the event loop (``/healthz`` keeps answering).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024


class Limits(BaseModel):
    """The ``[limits]`` table (see the module docstring for each key, its unit and its error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_b: int = Field(default=1 * MIB, gt=0)
    max_push_body_b: int = Field(default=64 * MIB, gt=0)
    max_depth: int = Field(default=12, gt=0)
    max_aliases: int = Field(default=30, ge=0)
    max_tokens: int = Field(default=2000, gt=0)
    request_timeout_s: float = Field(default=30.0, gt=0)
    max_concurrent_queries: int = Field(default=8, ge=0)
    queue_wait_s: float = Field(default=0.5, ge=0)
    rate_per_minute: int = Field(default=600, ge=0)
    rate_burst: int = Field(default=100, gt=0)
