"""GPU Ledger: what GPUs cost and how much work they did, in one hourly ledger."""

import os

# Polars' bundled jemalloc returns freed pages to the kernel at once by default; normalizing a
# large batch then spends up to a third of its CPU re-faulting fresh pages (BENCHMARKS.md).
# Keeping freed pages for 10 s removes that cost in a long-running server. Must be set before
# polars loads; an operator's own setting wins.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:10000,muzzy_decay_ms:10000")
