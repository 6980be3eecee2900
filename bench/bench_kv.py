#!/usr/bin/env python
"""Key-value reads over a large bucket, jssync side by side with nats-py (and nats.js), in one run.

One bucket of ``--keys`` keys (``k.00000`` ...; 128-byte values, history 1, direct get on) is
filled once; then each round measures every client on every workload, the order of the
clients rotating per round:

* ``keys``: every key of the bucket (jssync ``kv.keys()``, nats-py ``await kv.keys()``,
  nats.js ``await kv.keys()`` drained);
* ``get_all``: every key's value (jssync ``kv.get_many(">")``, one snapshot; nats-py and
  nats.js have no batch read: a watcher of every key read up to its "caught up" marker,
  the fastest way they have);
* ``get_listed``: the values of ``--listed`` keys named in a list (jssync
  ``kv.get_many(list)``, one batched direct get; nats-py and nats.js: one ``get`` per key,
  as their users must).

Every result is checked (the right keys, the right values). Prints keys/s per client and
workload: median [min..max], the ratio jssync / client per round and its median, and the
client CPU per key (process CPU of the Python clients; the node process's own CPU for nats.js).

    .venv/bin/python bench/bench_kv.py --keys 10000 --rounds 5 [--node-dir DIR] [--json out.json]

``--node-dir`` is a folder whose ``node_modules`` holds ``@nats-io/transport-node`` and
``@nats-io/kv``; without it (or without ``@nats-io/kv`` there) nats.js is skipped with that reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jssync
from jssync.errors import StreamNotFoundError
from jssync.server import NatsServer

BUCKET = "bench_kv"
WORKLOADS = ("keys", "get_all", "get_listed")
_HERE = Path(__file__).resolve().parent


def key_of(i: int) -> str:
    return f"k.{i:05d}"


def value_of(key: str) -> bytes:
    return (key + "|").encode().ljust(128, b"v")


def fill(url: str, n: int) -> None:
    with jssync.connect(url) as nc:
        js = nc.jetstream(timeout=30.0)
        try:
            js.delete_key_value(BUCKET)
        except StreamNotFoundError:
            pass
        js.create_key_value(bucket=BUCKET, history=1)
        for i in range(n):
            key = key_of(i)
            js.publish_async(f"$KV.{BUCKET}.{key}", value_of(key))
        js.publish_async_complete(timeout=60.0)


def check(workload: str, got: Any, n: int, listed: list[str]) -> int:
    """The number of keys read; AssertionError when the result is wrong."""
    if workload == "keys":
        assert sorted(got) == [key_of(i) for i in range(n)], f"keys: {len(got)} of {n}"
        return n
    want = [key_of(i) for i in range(n)] if workload == "get_all" else listed
    assert sorted(got) == sorted(want), f"{workload}: {len(got)} of {len(want)}"
    for k, v in got.items():
        assert v == value_of(k), (k, v[:32])
    return len(want)


# ------------------------------------------------------------------ clients


def run_jssync(url: str, workload: str, listed: list[str]) -> tuple[Any, float]:
    with jssync.connect(url) as nc:
        kv = nc.jetstream(timeout=30.0).key_value(BUCKET)
        t0 = time.perf_counter()
        if workload == "keys":
            got: Any = kv.keys()
        elif workload == "get_all":
            got = {k: e.value for k, e in kv.get_many(">").items()}
        else:
            got = {k: e.value for k, e in kv.get_many(listed).items()}
        elapsed = time.perf_counter() - t0
    return got, elapsed


def run_natspy(url: str, workload: str, listed: list[str]) -> tuple[Any, float]:
    import nats

    async def main() -> tuple[Any, float]:
        nc = await nats.connect(url)
        kv = await nc.jetstream(timeout=30.0).key_value(BUCKET)
        t0 = time.perf_counter()
        if workload == "keys":
            got: Any = await kv.keys()
        elif workload == "get_all":
            got = {}
            watcher = await kv.watchall()
            while True:
                e = await watcher.updates(timeout=30.0)
                if e is None:
                    break
                got[e.key] = e.value
            await watcher.stop()
        else:
            got = {}
            for k in listed:
                got[k] = (await kv.get(k)).value
        elapsed = time.perf_counter() - t0
        await nc.close()
        return got, elapsed

    return asyncio.run(main())


def natsjs_unavailable(node_dir: str | None) -> str | None:
    if not node_dir:
        return "no --node-dir given"
    modules = Path(node_dir) / "node_modules" / "@nats-io"
    for package in ("transport-node", "kv"):
        if not (modules / package).is_dir():
            return f"@nats-io/{package} is not installed in {node_dir}"
    return None


def run_natsjs(node_dir: str, url: str, workload: str, listed: list[str]) -> tuple[Any, float, float]:
    """Runs bench/kv_natsjs.mjs in node (from ``node_dir``); returns (result, elapsed s, CPU s)."""
    args = json.dumps({"url": url, "bucket": BUCKET, "workload": workload, "listed": listed})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(args)
    try:
        out = subprocess.run(
            ["node", str(_HERE / "kv_natsjs.mjs"), f.name],
            cwd=node_dir,
            env={**os.environ, "NODE_PATH": str(Path(node_dir) / "node_modules")},
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
    finally:
        os.unlink(f.name)
    r = json.loads(out.strip().splitlines()[-1])
    got: Any = r["keys"] if workload == "keys" else {k: v.encode("latin-1") for k, v in r["values"].items()}
    return got, r["elapsed_ns"] / 1e9, r["cpu_us"] / 1e6


# ------------------------------------------------------------------ the run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--listed", type=int, default=1000, help="keys named in the get_listed workload")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--server", default=None)
    ap.add_argument("--node-dir", default=None)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    listed = [key_of(i) for i in range(0, args.keys, max(1, args.keys // args.listed))][: args.listed]

    python_clients: dict[str, Callable[[str, str, list[str]], tuple[Any, float]]] = {
        "jssync": run_jssync,
        "nats-py": run_natspy,
    }
    skipped = natsjs_unavailable(args.node_dir)
    clients = list(python_clients) + ([] if skipped else ["nats.js"])
    rates: dict[str, dict[str, list[float]]] = {w: {c: [] for c in clients} for w in workloads}
    cpu: dict[str, dict[str, list[float]]] = {w: {c: [] for c in clients} for w in workloads}

    def measure(url: str, client: str, workload: str) -> None:
        if client == "nats.js":
            assert args.node_dir is not None
            got, elapsed, used = run_natsjs(args.node_dir, url, workload, listed)
        else:
            c0 = time.process_time()
            got, elapsed = python_clients[client](url, workload, listed)
            used = time.process_time() - c0  # (connect and close included: a few ms)
        n = check(workload, got, args.keys, listed)
        rates[workload][client].append(n / elapsed)
        cpu[workload][client].append(used / n * 1e6)

    def rounds(url: str) -> None:
        fill(url, args.keys)
        for client in clients:  # warm-up, not measured
            for workload in workloads:
                measure(url, client, workload)
        for r in rates.values():
            for v in r.values():
                v.clear()
        for c in cpu.values():
            for v in c.values():
                v.clear()
        for i in range(args.rounds):
            order = clients[i % len(clients) :] + clients[: i % len(clients)]
            for workload in workloads:
                for client in order:
                    measure(url, client, workload)

    if args.server:
        rounds(args.server)
    else:
        with tempfile.TemporaryDirectory() as d, NatsServer(store_dir=d).start() as s:
            rounds(s.url)

    if skipped:
        print(f"nats.js skipped: {skipped}")
    print(f"{args.keys} keys, {args.listed} listed, {args.rounds} rounds")
    print("| workload | client | keys/s median [min..max] | client CPU us/key | jssync / client per round | median |")
    print("|---|---|---|---:|---|---:|")
    summary: dict[str, Any] = {}
    for w in workloads:
        for c in clients:
            rs = rates[w][c]
            ratios = [a / b for a, b in zip(rates[w]["jssync"], rs)]
            row = {
                "rate_median": statistics.median(rs),
                "rates": rs,
                "cpu_us_per_key": statistics.median(cpu[w][c]),
                "ratio_jssync_to_client": statistics.median(ratios),
                "ratios": ratios,
            }
            summary.setdefault(w, {})[c] = row
            per_round = " ".join(f"{x:.2f}" for x in ratios)
            print(
                f"| {w} | {c} | {row['rate_median']:,.0f} [{min(rs):,.0f}..{max(rs):,.0f}] | "
                f"{row['cpu_us_per_key']:.1f} | {per_round} | {row['ratio_jssync_to_client']:.2f} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"keys": args.keys, "listed": args.listed, "rounds": args.rounds, "skipped": skipped, "summary": summary},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
