#!/usr/bin/env python
"""JetStream publish benchmark: jssync side by side with nats-py, against one nats-server, in one run.

Run on demand (not in CI), from the repository root with the dev virtualenv::

    .venv/bin/python bench/bench_js.py                    # defaults: 5k sync, 100k async (window 1000), 5 runs
    .venv/bin/python bench/bench_js.py --runs 7 --json out.json --wait-quiet 300
    .venv/bin/python bench/bench_js.py --server nats://127.0.0.1:4222   # a running JetStream server

Clients measured (each on its own connection to the same server):

* ``jssync``            the blocking client: ``js.publish`` / ``js.publish_async`` from the main thread.
* ``nats-py-asyncio``   nats-py used as intended: ``await js.publish(...)`` / ``await js.publish_async(...)``
                        in a coroutine (``nc.jetstream(publish_async_max_pending=window)``).
* ``nats-py-thread``    nats-py driven from a plain thread: a private event loop on a background thread,
                        every call made as ``asyncio.run_coroutine_threadsafe(coro, loop).result()``.
* ``raw-socket-floor``  not a client: one Python thread speaking the protocol over a blocking socket
                        (``PUB <subject> <reply> ...``, counting ``MSG`` replies, checking none is an
                        error). The floor of this machine; left out of the ratios.

Workloads (one file-storage stream ``BENCHJS`` on ``benchjs.>``, purged before every run):

* ``sync``   ``--sync-msgs`` publishes of ``--size`` bytes, each waiting for its PubAck.
* ``async``  ``--async-msgs`` publishes with at most ``--window`` in flight; timed from the first
             publish until every PubAck is in and checked (each future's result read: stream and a
             sequence, no error).

Each workload is warmed up on every client, then measured ``--runs`` times with the clients
interleaved (the first client rotates each round). Median and min..max over the runs, then the
ratios jssync / nats-py and the issue targets: sync >= 1.3x nats-py asyncio, async >= 2.5x.
Machine load is recorded per run as in bench_core.py (see bench/README.md, "Noise").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import io
import json
import os
import pstats
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)  # run from a checkout without installing

import bench_core as core  # noqa: E402  (machine facts, noise probes, statistics helpers)

import jssync  # noqa: E402
from jssync.client import Client as _JssyncClient  # noqa: E402

try:
    import nats  # noqa: E402
except ImportError:  # pragma: no cover - nats-py is a dev dependency
    nats = None  # type: ignore[assignment]

pc = time.perf_counter

STREAM = "BENCHJS"
SUBJECT_SYNC = "benchjs.sync"
SUBJECT_ASYNC = "benchjs.async"
TARGET_SYNC_RATIO = 1.3  # jssync sync publish >= 1.3x nats-py asyncio
TARGET_ASYNC_RATIO = 2.5  # jssync async publish >= 2.5x nats-py asyncio


def stream_config() -> dict[str, Any]:
    return {"name": STREAM, "subjects": ["benchjs.>"], "storage": "file", "retention": "limits", "num_replicas": 1}


# =============================================================================== clients


class BenchClient:
    name = ""

    def connect(self, url: str, window: int) -> None:
        raise NotImplementedError

    def sync(self, n: int, payload: bytes) -> dict[str, float]:
        raise NotImplementedError

    def async_(self, n: int, payload: bytes) -> dict[str, float]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _check_ack(stream: str, seq: int) -> None:
    if stream != STREAM or seq <= 0:
        raise RuntimeError(f"bad PubAck: stream={stream!r} seq={seq}")


class Jssync(BenchClient):
    name = "jssync"
    client_class: type[_JssyncClient] = _JssyncClient

    def connect(self, url: str, window: int) -> None:
        self.nc = self.client_class(url, name="bench-js-jssync")
        self.nc._start()
        self.js = self.nc.jetstream(timeout=10.0)
        self.js.configure_publish(max_pending=window)

    def sync(self, n: int, payload: bytes) -> dict[str, float]:
        publish = self.js.publish
        subject = SUBJECT_SYNC
        t0 = pc()
        for _ in range(n):
            ack = publish(subject, payload)
            _check_ack(ack.stream, ack.seq)
        return {"total_s": pc() - t0}

    def async_(self, n: int, payload: bytes) -> dict[str, float]:
        publish_async = self.js.publish_async
        subject = SUBJECT_ASYNC
        t0 = pc()
        futs = [publish_async(subject, payload) for _ in range(n)]
        t1 = pc()
        self.js.publish_async_complete(timeout=120)
        for f in futs:
            ack = f.result()
            _check_ack(ack.stream, ack.seq)
        return {"loop_s": t1 - t0, "total_s": pc() - t0}

    def close(self) -> None:
        self.nc.close()


class NatsPyAsyncio(BenchClient):
    name = "nats-py-asyncio"

    def connect(self, url: str, window: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(url, name="bench-js-nats-py-asyncio"))
        self.js = self.nc.jetstream(timeout=10.0, publish_async_max_pending=window)

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def sync(self, n: int, payload: bytes) -> dict[str, float]:
        js = self.js

        async def run() -> dict[str, float]:
            publish = js.publish
            subject = SUBJECT_SYNC
            t0 = pc()
            for _ in range(n):
                ack = await publish(subject, payload)
                _check_ack(ack.stream, ack.seq)
            return {"total_s": pc() - t0}

        return self._run(run())  # type: ignore[no-any-return]

    def async_(self, n: int, payload: bytes) -> dict[str, float]:
        js = self.js

        async def run() -> dict[str, float]:
            publish_async = js.publish_async
            subject = SUBJECT_ASYNC
            t0 = pc()
            futs = [await publish_async(subject, payload) for _ in range(n)]
            t1 = pc()
            await js.publish_async_completed()
            for f in futs:
                ack = f.result()
                _check_ack(ack.stream, ack.seq)
            return {"loop_s": t1 - t0, "total_s": pc() - t0}

        return self._run(run())  # type: ignore[no-any-return]

    def close(self) -> None:
        self._run(self.nc.close())
        self.loop.close()


class NatsPyThread(BenchClient):
    """nats-py from a plain thread: its event loop runs on a private background thread."""

    name = "nats-py-thread"

    def connect(self, url: str, window: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nats-py-thread-loop", daemon=True)
        self.thread.start()
        self.nc = self.call(nats.connect(url, name="bench-js-nats-py-thread"))
        self.js = self.nc.jetstream(timeout=10.0, publish_async_max_pending=window)

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def sync(self, n: int, payload: bytes) -> dict[str, float]:
        publish = self.js.publish
        loop = self.loop
        submit = asyncio.run_coroutine_threadsafe
        subject = SUBJECT_SYNC
        t0 = pc()
        for _ in range(n):
            ack = submit(publish(subject, payload), loop).result()
            _check_ack(ack.stream, ack.seq)
        return {"total_s": pc() - t0}

    def async_(self, n: int, payload: bytes) -> dict[str, float]:
        js = self.js
        loop = self.loop
        submit = asyncio.run_coroutine_threadsafe
        publish_async = js.publish_async
        subject = SUBJECT_ASYNC
        t0 = pc()
        # Each call returns once the message is queued (it waits while the window is full); the
        # result is nats-py's asyncio future of the PubAck, read back on the loop at the end.
        futs = [submit(publish_async(subject, payload), loop).result() for _ in range(n)]
        t1 = pc()

        async def check() -> None:
            await js.publish_async_completed()
            for f in futs:
                ack = f.result()
                _check_ack(ack.stream, ack.seq)

        self.call(check())
        return {"loop_s": t1 - t0, "total_s": pc() - t0}

    def close(self) -> None:
        self.call(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class RawFloor(BenchClient):
    """Not a client: one Python thread writing PUBs with reply subjects to a blocking socket and
    counting the MSG replies (a reply that is not a PubAck fails the run). Excluded from ratios."""

    name = "raw-socket-floor"

    def connect(self, url: str, window: int) -> None:
        parts = urlsplit(url if "://" in url else "nats://" + url)
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.window = window
        self.buf = b""
        self._recv_until(b"\r\n")  # INFO
        self.buf = b""
        self.sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":true,"no_responders":true}\r\n'
            b"SUB _RAWJS.* 1\r\nPING\r\n"
        )
        self._recv_until(b"PONG\r\n")
        self.buf = b""

    def _recv_until(self, needle: bytes) -> None:
        while needle not in self.buf:
            chunk = self.sock.recv(262144)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def _acks(self) -> int:
        """Consume whole MSG frames from the buffer; returns how many."""
        buf = self.buf
        pos = 0
        count = 0
        n = len(buf)
        while True:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            line = buf[pos:end]
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                stop = end + 2 + size
                if stop + 2 > n:
                    break
                if buf[end + 2 : end + 12] != b'{"stream":':
                    raise RuntimeError(f"not a PubAck: {buf[end + 2 : stop][:120]!r}")
                count += 1
                pos = stop + 2
            elif line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                pos = end + 2
            else:
                pos = end + 2
        self.buf = buf[pos:]
        return count

    def _run(self, n: int, payload: bytes, window: int, subject: bytes) -> float:
        sock = self.sock
        head = b"PUB " + subject + b" _RAWJS.%d " + str(len(payload)).encode() + b"\r\n"
        tail = payload + b"\r\n"
        sent = acked = 0
        t0 = pc()
        while acked < n:
            out = []
            while sent < n and sent - acked < window:
                out.append(head % sent + tail)
                sent += 1
            if out:
                sock.sendall(b"".join(out))
            chunk = sock.recv(262144)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
            acked += self._acks()
        return pc() - t0

    def sync(self, n: int, payload: bytes) -> dict[str, float]:
        return {"total_s": self._run(n, payload, 1, SUBJECT_SYNC.encode())}

    def async_(self, n: int, payload: bytes) -> dict[str, float]:
        return {"total_s": self._run(n, payload, self.window, SUBJECT_ASYNC.encode())}

    def close(self) -> None:
        self.sock.close()


CLIENTS: dict[str, Callable[[], BenchClient]] = {
    "jssync": Jssync,
    "nats-py-asyncio": NatsPyAsyncio,
    "nats-py-thread": NatsPyThread,
    "raw-socket-floor": RawFloor,
}
PEERS = ("nats-py-asyncio", "nats-py-thread")


# =============================================================================== runner


class Runner:
    def __init__(self, args: argparse.Namespace, url: str, server_pid: int | None) -> None:
        self.args = args
        self.url = url
        self.server_pid = server_pid
        self.payload = b"x" * args.size
        self.clients = [CLIENTS[name]() for name in args.clients]
        self.results: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.best_probe = float("inf")
        self.admin: _JssyncClient | None = None

    def log(self, text: str) -> None:
        if not self.args.quiet:
            print(text, file=sys.stderr, flush=True)

    # -- the stream ---------------------------------------------------------------------

    def setup_stream(self) -> None:
        self.admin = jssync.connect(self.url, name="bench-js-admin")
        body = json.dumps(stream_config()).encode()
        self.admin.request(f"$JS.API.STREAM.DELETE.{STREAM}", b"", timeout=10)
        reply = json.loads(self.admin.request(f"$JS.API.STREAM.CREATE.{STREAM}", body, timeout=10).data)
        if "error" in reply:
            raise RuntimeError(f"cannot create the stream: {reply['error']}")

    def purge(self) -> None:
        assert self.admin is not None
        reply = json.loads(self.admin.request(f"$JS.API.STREAM.PURGE.{STREAM}", b"", timeout=30).data)
        if "error" in reply:
            raise RuntimeError(f"cannot purge the stream: {reply['error']}")

    def stream_msgs(self) -> int:
        assert self.admin is not None
        info = json.loads(self.admin.request(f"$JS.API.STREAM.INFO.{STREAM}", b"", timeout=10).data)
        return int(info["state"]["messages"])

    # -- measuring ----------------------------------------------------------------------

    def measure(self, fn: Callable[[], dict[str, Any]], expected: int) -> dict[str, Any]:
        self.purge()
        gc.collect()
        probe0 = core.cpu_probe()
        ours = [self.server_pid]
        sys0 = core.system_cpu()
        ours0 = [core.proc_cpu_s(pid) for pid in ours]
        cpu0 = time.process_time()
        w0 = pc()
        res = fn()
        wall = pc() - w0
        res["wall_s"] = round(wall, 3)
        res["client_cpu_s"] = time.process_time() - cpu0
        ours1 = [core.proc_cpu_s(pid) for pid in ours]
        sys1 = core.system_cpu()
        res["probe_us"] = round(max(probe0, core.cpu_probe()), 4)
        self.best_probe = min(self.best_probe, res["probe_us"])
        if ours0[0] is not None and ours1[0] is not None:
            res["server_cpu_s"] = ours1[0] - ours0[0]
        if sys0 is not None and sys1 is not None:
            own = res["client_cpu_s"] + sum(b - a for a, b in zip(ours0, ours1) if a is not None and b is not None)
            res["foreign_cores"] = round(max(0.0, (sys1[0] - sys0[0]) - own) / wall, 3)
            res["steal_cores"] = round((sys1[1] - sys0[1]) / wall, 3)
        stored = self.stream_msgs()
        if stored != expected:
            raise RuntimeError(f"the stream holds {stored} messages after the run, expected {expected}")
        return res

    def noise_score(self, res: dict[str, Any]) -> float:
        a = self.args
        foreign = res.get("foreign_cores", 0.0) / a.noise_limit if a.noise_limit > 0 else 0.0
        slow = (res["probe_us"] / self.best_probe) / a.probe_limit if a.probe_limit > 0 else 0.0
        return max(foreign, slow)

    def rounds(self, workload: str, n: int, warm_n: int) -> None:
        a = self.args
        p = self.payload
        call: Callable[[BenchClient, int], dict[str, Any]] = (
            (lambda c, k: c.sync(k, p)) if workload == "sync" else (lambda c, k: c.async_(k, p))
        )
        self.log(f"[{workload}] warm-up")
        for c in self.clients:
            self.purge()
            call(c, warm_n)
        out = self.results.setdefault(workload, {c.name: [] for c in self.clients})
        k = len(self.clients)
        for r in range(a.runs):
            order = self.clients[r % k :] + self.clients[: r % k]
            for c in order:
                best: dict[str, Any] | None = None
                attempt = 0
                for attempt in range(1 + a.retries):
                    res = self.measure(functools.partial(call, c, n), n)
                    res["load1"] = round(os.getloadavg()[0], 2)
                    score = self.noise_score(res)
                    res["noise"] = round(score, 2)
                    noisy = score > 1.0
                    again = noisy and attempt < a.retries and res["wall_s"] <= a.retry_max_s
                    if best is None or score < best["noise"]:
                        best = res
                    self.log(
                        f"[{workload}] run {r + 1}/{a.runs} {c.name:<18} {n / res['total_s']:>10,.0f} msgs/s"
                        f"  other {res.get('foreign_cores', float('nan')):.2f} cores  probe {res['probe_us']:.3f} us"
                        + ("  (disturbed, again)" if again else "  (disturbed)" if noisy else "")
                    )
                    if not again:
                        break
                    time.sleep(a.retry_pause)
                assert best is not None
                best["attempts"] = attempt + 1
                out[c.name].append(best)

    def wait_quiet(self) -> None:
        a = self.args
        deadline = pc() + a.wait_quiet
        while True:
            sys0 = core.system_cpu()
            cpu0 = time.process_time()
            w0 = pc()
            probes = []
            for _ in range(8):
                probes.append(core.cpu_probe())
                time.sleep(0.1)
            sys1 = core.system_cpu()
            wall = pc() - w0
            self.best_probe = min(self.best_probe, *probes)
            if sys0 is None or sys1 is None:
                return
            other = max(0.0, (sys1[0] - sys0[0]) - (time.process_time() - cpu0)) / wall
            if other <= a.noise_limit or pc() >= deadline:
                self.log(f"other load before start: {other:.2f} cores; CPU probe best {self.best_probe:.3f} us")
                return
            self.log(f"waiting for a quiet machine: other load {other:.2f} cores")
            time.sleep(2.0)

    def run_all(self) -> None:
        a = self.args
        self.wait_quiet()
        self.setup_stream()
        for c in self.clients:
            c.connect(self.url, a.window)
        try:
            if "sync" in a.workloads:
                self.rounds("sync", a.sync_msgs, a.warmup_sync)
            if "async" in a.workloads:
                self.rounds("async", a.async_msgs, a.warmup_async)
        finally:
            for c in self.clients:
                try:
                    c.close()
                except Exception as exc:  # noqa: BLE001 - report and go on closing the others
                    self.log(f"closing {c.name}: {exc!r}")
            if self.admin is not None:
                self.admin.close()

    def summary(self) -> dict[str, Any]:
        a = self.args
        s: dict[str, Any] = {}
        for workload, per_client in self.results.items():
            n = a.sync_msgs if workload == "sync" else a.async_msgs
            s[workload] = {}
            for name, runs in per_client.items():
                row: dict[str, Any] = {
                    "msgs_per_s": core.summarize([n / r["total_s"] for r in runs]),
                    "us_per_msg": core.summarize([r["total_s"] / n * 1e6 for r in runs]),
                    "cpu_us_per_msg": core.summarize([r["client_cpu_s"] / n * 1e6 for r in runs]),
                }
                if runs and "server_cpu_s" in runs[0]:
                    row["server_cpu_us_per_msg"] = core.summarize([r["server_cpu_s"] / n * 1e6 for r in runs])
                if runs and "foreign_cores" in runs[0]:
                    row["foreign_cores"] = core.summarize([r["foreign_cores"] for r in runs])
                row["repeated_runs"] = sum(1 for r in runs if r.get("attempts", 1) > 1)
                row["disturbed_runs"] = sum(1 for r in runs if r.get("noise", 0.0) > 1.0)
                row["probe_us"] = core.summarize([r["probe_us"] for r in runs])
                s[workload][name] = row
        return s


# =============================================================================== report


def ratios(summary: dict[str, Any]) -> list[tuple[str, str, float]]:
    rows = []
    for workload, label in (("sync", "sync publish msgs/s"), ("async", "async publish msgs/s")):
        per = summary.get(workload, {})
        if "jssync" not in per:
            continue
        for peer in PEERS:
            if peer in per:
                rows.append((label, peer, per["jssync"]["msgs_per_s"]["median"] / per[peer]["msgs_per_s"]["median"]))
    return rows


def verdicts(summary: dict[str, Any]) -> list[str]:
    out = []
    for workload, target in (("sync", TARGET_SYNC_RATIO), ("async", TARGET_ASYNC_RATIO)):
        per = summary.get(workload, {})
        if "jssync" in per and "nats-py-asyncio" in per:
            r = per["jssync"]["msgs_per_s"]["median"] / per["nats-py-asyncio"]["msgs_per_s"]["median"]
            out.append(f"target {workload} publish >= {target}x nats-py-asyncio: {r:.2f}x -> {'MET' if r >= target else 'MISSED'}")
    return out


def render(facts: dict[str, Any], args: argparse.Namespace, summary: dict[str, Any]) -> str:
    lines: list[str] = []
    w = lines.append
    w("== machine")
    for k, v in facts.items():
        w(f"  {k:<14} {v}")
    w(
        f"== config  sync_msgs={args.sync_msgs} async_msgs={args.async_msgs} window={args.window} size={args.size} B "
        f"runs={args.runs} stream={STREAM} (file storage, purged before each run; median [min..max] over runs)"
    )
    titles = {
        "sync": f"JetStream publish, waiting for each PubAck: {args.sync_msgs:,} x {args.size} B",
        "async": (
            f"JetStream async publish, window {args.window}: {args.async_msgs:,} x {args.size} B, "
            "every PubAck checked"
        ),
    }
    for workload in ("sync", "async"):
        if workload not in summary:
            continue
        w("")
        w(f"== {titles[workload]}")
        w(f"  {'client':<18} {'msgs/s':>30} {'us/msg':>24} {'client CPU us/msg':>18} {'server CPU us/msg':>18}")
        for name, row in summary[workload].items():
            srv = row.get("server_cpu_us_per_msg", {}).get("median", float("nan"))
            w(
                f"  {name:<18} {core.fmt_range(row['msgs_per_s'], ',.0f'):>30} {core.fmt_range(row['us_per_msg'], '.1f'):>24}"
                f" {row['cpu_us_per_msg']['median']:>18.1f} {srv:>18.1f}"
            )
    noise = [(wl, name, row) for wl, per in summary.items() for name, row in per.items() if "foreign_cores" in row]
    if noise:
        w("")
        w(
            f"== disturbance: other = CPU of other processes (cores); a run with other > {args.noise_limit} or a CPU "
            f"probe > {args.probe_limit}x the best was repeated up to {args.retries} times, keeping the quietest"
        )
        for wl, name, row in noise:
            fc = row["foreign_cores"]
            w(
                f"  {wl:<5} {name:<18} other {fc['median']:.2f} [{fc['min']:.2f}..{fc['max']:.2f}] cores  "
                f"repeated {row['repeated_runs']}  still disturbed {row['disturbed_runs']}"
            )
    rs = ratios(summary)
    if rs:
        w("")
        w("== ratios jssync / nats-py (medians, higher is better for jssync)")
        for label, peer, r in rs:
            w(f"  {label:<22} vs {peer:<18} {r:6.2f}x")
    vs = verdicts(summary)
    if vs:
        w("")
        w("== issue targets")
        for v in vs:
            w(f"  {v}")
    return "\n".join(lines)


# =============================================================================== profile


_ProfiledJssync = core._ProfiledJssync  # a Client whose I/O thread runs under cProfile


def profile_jssync(runner: Runner, args: argparse.Namespace) -> str:
    """cProfile of jssync's async publish: caller thread and I/O thread (inflated per-call cost)."""
    out = io.StringIO()
    out.write("== cProfile of jssync async publish (tottime order; the profiler inflates per-call cost)\n")
    runner.admin = jssync.connect(runner.url, name="bench-js-admin")
    c = Jssync()
    c.client_class = _ProfiledJssync
    c.connect(runner.url, args.window)
    try:
        runner.purge()
        c.async_(args.warmup_async, runner.payload)
        runner.purge()
        prof = cProfile.Profile()
        prof.enable()
        c.async_(args.async_msgs, runner.payload)
        prof.disable()
    finally:
        c.close()
        runner.admin.close()
    for thread, pr in (("caller thread", prof), ("I/O thread", _ProfiledJssync.io_profile)):
        out.write(f"\n--- {thread}\n")
        if pr is None:
            out.write("(no profile)\n")
            continue
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(args.profile_top)
    return out.getvalue()


# =============================================================================== main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sync-msgs", type=int, default=5_000, help="publishes per sync run (default 5000)")
    p.add_argument("--async-msgs", type=int, default=100_000, help="publishes per async run (default 100000)")
    p.add_argument("--window", type=int, default=1000, help="async publishes in flight (default 1000)")
    p.add_argument("--size", type=int, default=128, help="payload bytes (default 128)")
    p.add_argument("--runs", type=int, default=5, help="measured runs per client and workload (default 5)")
    p.add_argument("--warmup-sync", type=int, default=500, help="warm-up sync publishes per client (default 500)")
    p.add_argument("--warmup-async", type=int, default=20_000, help="warm-up async publishes per client (default 20000)")
    p.add_argument("--server", metavar="URL", help="use this running JetStream server instead of starting one")
    p.add_argument("--json", metavar="FILE", help="write machine facts, raw runs and summary as JSON")
    p.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated subset of: {', '.join(CLIENTS)}")
    p.add_argument("--workloads", default="sync,async", help="comma-separated subset of sync,async")
    p.add_argument("--profile", action="store_true", help="also print a cProfile of jssync's async publish")
    p.add_argument("--profile-top", type=int, default=18)
    p.add_argument("--noise-limit", type=float, default=0.3, help="repeat a run during which other processes used more cores")
    p.add_argument("--probe-limit", type=float, default=1.5, help="repeat a run whose CPU probe is this much slower than the best")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS", help="first wait up to this long for a quiet machine")
    p.add_argument("--retries", type=int, default=3, help="repeats of a noisy run; the quietest is kept (default 3)")
    p.add_argument("--retry-max-s", type=float, default=8.0, help="runs longer than this are not repeated (default 8 s)")
    p.add_argument("--retry-pause", type=float, default=2.0)
    p.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    args = p.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [c for c in args.clients if c not in CLIENTS] + [w for w in args.workloads if w not in ("sync", "async")]
    if unknown:
        p.error(f"unknown client or workload: {', '.join(unknown)}")
    if min(args.sync_msgs, args.async_msgs, args.window, args.size, args.runs) < 1:
        p.error("--sync-msgs, --async-msgs, --window, --size and --runs must be >= 1")
    if nats is None and any(c.startswith("nats-py") for c in args.clients):
        p.error("nats-py is not installed (pip install nats-py) - or pass --clients jssync")
    return args


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    server = None
    if args.server:
        url = args.server
        server_pid = None
    else:
        from jssync.server import NatsServer

        server = NatsServer(jetstream=True, name="bench-js")
        server.start()
        url = server.url
        server_pid = server.pid
    try:
        facts = core.machine_facts(url, server is not None)
        facts["server"] = "started by the benchmark (JetStream on, file store in a temp dir)" if server else f"external {url}"
        runner = Runner(args, url, server_pid)
        t0 = pc()
        runner.run_all()
        facts["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        facts["wall_s"] = round(pc() - t0, 1)
        summary = runner.summary()
        print(render(facts, args, summary), flush=True)
        prof_text = ""
        if args.profile:
            prof_text = profile_jssync(runner, args)
            print("\n" + prof_text, flush=True)
        if args.json:
            doc = {
                "facts": facts,
                "config": {
                    k: getattr(args, k)
                    for k in ("sync_msgs", "async_msgs", "window", "size", "runs", "warmup_sync", "warmup_async", "clients", "workloads")
                },
                "summary": summary,
                "ratios": [{"what": r[0], "vs": r[1], "ratio": r[2]} for r in ratios(summary)],
                "targets": verdicts(summary),
                "runs": runner.results,
                "profile": prof_text or None,
            }
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    finally:
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
