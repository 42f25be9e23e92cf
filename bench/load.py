"""Load benchmark: N concurrent GraphQL clients for T seconds against a running GPU Ledger.

    .venv/bin/python bench/load.py --url http://127.0.0.1:8000 [--token SECRET]
        [--clients 200] [--duration 60] [--warmup 5] [--mix cost=1,usage=1]
        [--window-days 30] [--cold] [--json FILE]

Each client is one asyncio task with its own keep-alive HTTP/1.1 connection (``--client raw``:
asyncio streams, a tenth of httpx's CPU; ``--client httpx``: an httpx pool); it sends its next
request as soon as the previous one is answered, for ``--duration`` seconds after ``--warmup``
seconds not counted. Requests are drawn from ``--mix`` (name=weight, round robin by weight, each
client starting at a different point of the cycle):

* ``cost``: ``cost(window, groupBy:[PROJECT]) { project cost { amount currency } }``
* ``usage``: ``usage(window, groupBy:[DEVICE]) { device gpuHours busyGpuHours }``
* ``dash``: both in one document.

The window is the last ``--window-days`` whole UTC days before today (the demo holds 30 days up
to now). ``--cold`` gives every request a variable of its own that the document does not use: the
same work for the server, but no two requests share an answer-cache key, so every request takes
the cold (miss) path.

With ``--server-pid`` (the ``serve`` process, on this host) it also reports the server's CPU time
per request (the process and its workers, user + system): on a shared machine the throughput
depends on the CPU the server gets, its CPU per request much less.

Printed: requests/s, latency p50/p95/p99/max of the answered requests, and errors by kind (HTTP
status, GraphQL error code, or the client-side exception), plus the answer cache's header counts
(``x-answer-cache``: hit/miss/bypass). A request counts as an error unless it is HTTP 200 with no
``errors``. The server's own settings (workers, cache, limits) are the caller's business: for 200
clients on one token set ``GPU_LEDGER_LIMITS__RATE_PER_MINUTE=0`` (else 429 is the answer) and a
``GPU_LEDGER_LIMITS__QUEUE_WAIT_S`` longer than the slowest request (else 503 OVERLOADED).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

QUERIES = {
    "cost": "query Cost($w: TimeWindow!) { cost(window: $w, groupBy: [PROJECT]) "
    "{ project cost { amount currency } } }",
    "usage": "query Usage($w: TimeWindow!) { usage(window: $w, groupBy: [DEVICE]) "
    "{ device gpuHours utilizationPct } }",
    "dash": "query Dash($w: TimeWindow!) { cost(window: $w, groupBy: [PROJECT]) "
    "{ project cost { amount currency } } usage(window: $w, groupBy: [DEVICE]) { device gpuHours } }",
}


@dataclass
class Tally:
    latencies_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    by_query: Counter[str] = field(default_factory=Counter)
    sent: int = 0  # warm-up included


def parse_mix(text: str) -> list[str]:
    """``cost=1,usage=1`` → the cycle of query names, each as often as its weight."""
    cycle: list[str] = []
    for part in text.split(","):
        name, _, weight = part.partition("=")
        name = name.strip()
        if name not in QUERIES:
            raise SystemExit(f"--mix: unknown query {name!r}; known: {', '.join(QUERIES)}")
        count = int(weight or 1)
        if count < 0:
            raise SystemExit(f"--mix: weight of {name} must be ≥ 0")
        cycle += [name] * count
    if not cycle:
        raise SystemExit("--mix: no query with a positive weight")
    return cycle


def default_window(days: int) -> dict[str, str]:
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return {"start": (today - dt.timedelta(days=days)).isoformat(), "end": today.isoformat()}


Answer = tuple[int, dict[str, str], bytes]  # status, headers (lower-case names), body


def _error_kind(status: int, body: bytes) -> str | None:
    if status != 200:
        return f"HTTP {status}"
    try:
        answer = json.loads(body)
    except ValueError:
        return "invalid JSON"
    if answer.get("errors"):
        codes = sorted({(e.get("extensions") or {}).get("code", "no code") for e in answer["errors"]})
        return "GraphQL " + ",".join(codes)
    return None


class RawConnection:
    """One keep-alive HTTP/1.1 connection over asyncio streams, reopened when the server closes
    it. A tenth of httpx's CPU per request: on a small shared machine the load generator must not
    be what is measured. Content-Length bodies only (what uvicorn sends for these answers)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parsed = urlsplit(url)
        if parsed.scheme != "http" or parsed.hostname is None:
            raise SystemExit(f"--client raw needs an http:// URL, got {url!r}")
        self.host, self.port = parsed.hostname, parsed.port or 80
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.head = f"Host: {parsed.netloc}\r\nContent-Type: application/json\r\n{extra}".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> Answer:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (path.encode(), self.head, len(body))
        try:
            self.writer.write(request + body)
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            content = await self.reader.readexactly(int(headers["content-length"]))
        except BaseException:
            self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, content

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def client(
    number: int,
    send: Callable[[bytes], Awaitable[Answer]],
    cycle: list[str],
    window: dict[str, str],
    cold: bool,
    measure_from: float,
    stop_at: float,
    tally: Tally,
) -> None:
    names = itertools.islice(itertools.cycle(cycle), number % len(cycle), None)
    fixed = {
        name: json.dumps({"query": QUERIES[name], "variables": {"w": window}}).encode() for name in QUERIES
    }
    for sent, name in enumerate(names):
        now = time.perf_counter()
        if now >= stop_at:
            return
        body = fixed[name]
        if cold:  # a variable the document does not use: same work, a key of its own
            variables = {"w": window, "nonce": f"{number}-{sent}"}
            body = json.dumps({"query": QUERIES[name], "variables": variables}).encode()
        started = time.perf_counter()
        headers: dict[str, str] = {}
        try:
            status, headers, content = await send(body)
            kind = _error_kind(status, content)
        except (OSError, EOFError, ValueError, KeyError, TimeoutError, httpx.HTTPError) as exc:
            kind = type(exc).__name__
        took_s = time.perf_counter() - started
        tally.sent += 1
        if started < measure_from:
            continue  # warm-up
        tally.by_query[name] += 1
        if kind is not None:
            tally.errors[kind] += 1
            continue
        tally.latencies_s.append(took_s)
        tally.cache[headers.get("x-answer-cache", "none")] += 1


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and all its descendants
    (``serve --workers``: the supervisor and its workers). Linux /proc."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(children)
        frontier += children
    return sum(times.get(p, 0.0) for p in tree)


def percentile(sorted_s: list[float], q: float) -> float:
    if not sorted_s:
        return float("nan")
    index = min(len(sorted_s) - 1, max(0, round(q * (len(sorted_s) - 1))))
    return sorted_s[index]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cycle = parse_mix(args.mix)
    window = default_window(args.window_days)
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    timeout = httpx.Timeout(args.timeout_s)
    tally = Tally()
    async with httpx.AsyncClient(base_url=args.url, headers=headers, limits=limits, timeout=timeout) as http:
        probe = await http.post("/graphql", json={"query": QUERIES[cycle[0]], "variables": {"w": window}})
        if (kind := _error_kind(probe.status_code, probe.content)) is not None:
            raise SystemExit(f"the first request failed ({kind}): {probe.text[:500]}")

        def sender(n: int) -> Callable[[bytes], Awaitable[Answer]]:
            if args.client == "raw":
                connection = RawConnection(args.url, headers)

                async def raw(body: bytes) -> Answer:
                    return await asyncio.wait_for(connection.post("/graphql", body), args.timeout_s)

                return raw

            async def pooled(body: bytes) -> Answer:
                r = await http.post("/graphql", content=body, headers={"content-type": "application/json"})
                return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content

            return pooled

        senders = [sender(n) for n in range(args.clients)]
        start = time.perf_counter()
        measure_from, stop_at = start + args.warmup, start + args.warmup + args.duration
        load_before = os.getloadavg()
        cpu_before = tree_cpu_s(args.server_pid) if args.server_pid else None
        client_cpu_before = time.process_time()
        await asyncio.gather(
            *(
                client(n, senders[n], cycle, window, args.cold, measure_from, stop_at, tally)
                for n in range(args.clients)
            )
        )
        # Requests in flight at stop_at finish after it: the rate is over the time they took.
        elapsed_s = max(time.perf_counter() - measure_from, 1e-9)
        # (the server's CPU over warm-up and measurement, per request sent in that time)
        server_cpu_s = tree_cpu_s(args.server_pid) - cpu_before if cpu_before is not None else None
        client_cpu_s = time.process_time() - client_cpu_before
    lat = sorted(tally.latencies_s)
    answered = len(lat)
    return {
        "url": args.url,
        "clients": args.clients,
        "duration_s": args.duration,
        "mix": args.mix,
        "cold": args.cold,
        "client": args.client,
        "window": window,
        "requests": answered + sum(tally.errors.values()),
        "answered": answered,
        "req_per_s": answered / elapsed_s,
        "p50_ms": percentile(lat, 0.50) * 1000,
        "p95_ms": percentile(lat, 0.95) * 1000,
        "p99_ms": percentile(lat, 0.99) * 1000,
        "max_ms": (lat[-1] if lat else float("nan")) * 1000,
        "mean_ms": (statistics.fmean(lat) if lat else float("nan")) * 1000,
        "errors": dict(tally.errors),
        "server_cpu_s": server_cpu_s,
        "client_cpu_ms_per_request": client_cpu_s * 1000 / max(1, tally.sent),
        "server_cpu_ms_per_request": (
            server_cpu_s * 1000 / max(1, tally.sent) if server_cpu_s is not None else None
        ),
        "cache": dict(tally.cache),
        "by_query": dict(tally.by_query),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the service, e.g. http://127.0.0.1:8000")
    parser.add_argument(
        "--token", default=os.environ.get("GPU_LEDGER_TOKEN"), help="API token (or $GPU_LEDGER_TOKEN)"
    )
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--mix", default="cost=1,usage=1", help=f"name=weight,… of {', '.join(QUERIES)}")
    parser.add_argument("--window-days", type=int, default=30)
    parser.add_argument("--cold", action="store_true", help="no two requests share a cache key")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="one request's client-side limit")
    parser.add_argument("--json", help="also write the result to this file")
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="raw: one asyncio keep-alive connection per client (cheap); httpx: an httpx pool",
    )
    parser.add_argument(
        "--server-pid",
        type=int,
        help="the serve process (same host): report its CPU per request, workers included",
    )
    args = parser.parse_args(argv)
    if args.clients < 1 or args.duration <= 0:
        raise SystemExit("--clients must be ≥ 1 and --duration > 0")
    result = asyncio.run(run(args))
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(result["errors"].items())) or "0"
    cache = ", ".join(f"{k} {v}" for k, v in sorted(result["cache"].items()))
    print(
        f"{result['clients']} clients × {result['duration_s']:g} s, mix {result['mix']}"
        f"{' (cold: unique keys)' if result['cold'] else ''}: {result['req_per_s']:.1f} req/s, "
        f"p50 {result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
        f"max {result['max_ms']:.0f} ms; {result['answered']} answered; errors {errors}; cache: {cache}; "
        f"load average {result['loadavg_before'][0]:.2f} → {result['loadavg_after'][0]:.2f}"
        + (
            f"; server CPU {result['server_cpu_ms_per_request']:.2f} ms per request"
            if result["server_cpu_ms_per_request"] is not None
            else ""
        )
        + f"; this client's CPU {result['client_cpu_ms_per_request']:.2f} ms per request"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
