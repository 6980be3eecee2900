#!/usr/bin/env python
"""JetStream pull-consumer benchmark: jssync side by side with its peers, against one nats-server, in one run.

Run on demand (not in CI), from the repository root with the dev virtualenv::

    .venv/bin/python bench/bench_pull.py                  # 100k x 128 B fetch + consume, 1M x 64 B memory, 5 runs
    .venv/bin/python bench/bench_pull.py --runs 7 --json out.json --wait-quiet 300
    .venv/bin/python bench/bench_pull.py --msgs 20000 --mem-msgs 100000 --runs 2   # smoke run

Clients (each on its own connection to the same server; the stream is shared, every measured run
gets a fresh durable pull consumer, ack explicit, deliver all, deleted after the run):

* ``jssync``           ``consumer.fetch(batch, expires=5)`` / ``consumer.consume(handler)``, ``msg.ack()``.
* ``nats-py-asyncio``  ``js.pull_subscribe_bind(...)`` then ``await psub.fetch(batch)``, ``await msg.ack()``.
                       nats-py 2.16 has no continuous pull API (no ``consume``/``messages``), so its
                       consume workload is the same fetch loop calling an async handler per message.
* ``nats-py-thread``   the same driven from a plain thread: its event loop runs on a background
                       thread, every call is ``asyncio.run_coroutine_threadsafe(coro, loop).result()``
                       (the fetch, and each ack).
* ``natsio``           the ``natsio`` package (PyPI); measured only where it has a JetStream pull
                       API. Version 0.2.1 is a core-NATS client (publish/subscribe/request, no
                       JetStream module), so it is skipped with the reason printed.

Workloads:

* ``fetch``    ``--msgs`` messages of ``--size`` B pre-loaded in a file stream; loop fetch(``--batch``)
               and ack every message until all are received; timed from the first fetch until a
               flush round trip after the last ack (every ack has reached the server).
* ``consume``  the same data; jssync ``consume(handler, max_messages=--batch)`` with the handler
               acking each message; timed until the handler has acked the last one and a flush.
* ``memory``   ``--mem-msgs`` x ``--mem-size`` B consumed with ack by each client in its own
               subprocess: peak RSS (``VmHWM``; ``ru_maxrss`` in the JSON) and VmRSS sampled at 10/50/90 % progress, to
               show that memory stays flat.

fetch and consume are warmed up on every client, then measured ``--runs`` times with the clients
interleaved (the runner of bench_core.py: disturbance detection, repeats of disturbed runs). The
report gives median [min..max], ratios jssync / each peer, per-round ratios and the issue targets:
fetch >= 1.5x the best peer, consume >= 1.8x the best peer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)  # run from a checkout without installing

import bench_core as core  # noqa: E402  (runner, noise probes, statistics, machine facts)
import bench_js  # noqa: E402  (client connection patterns)

import jssync  # noqa: E402

try:
    import nats  # noqa: E402,F401
except ImportError:  # pragma: no cover - nats-py is a dev dependency
    nats = None  # type: ignore[assignment]

pc = time.perf_counter

STREAM = "BENCHPULL"
SUBJECT = "benchpull.data"
MEM_STREAM = "BENCHPULLMEM"
MEM_SUBJECT = "benchpull.mem"
EXPIRES = 5.0  # seconds, every fetch
TARGETS = {"fetch": 1.5, "consume": 1.8}  # jssync >= this x the best peer (issue 4)
QUOTED = {"fetch": ("natsio", 51_000), "consume": ("natsio", 43_000)}  # best-peer figures quoted in issue 4
MARKS = (0.1, 0.5, 0.9)


def vmrss_kib(field: str = "VmRSS:") -> int:
    """Resident set size of this process now (``VmHWM:``: its peak) from /proc, KiB; 0 if unavailable."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def natsio_skip_reason() -> str | None:
    """Why natsio cannot run the pull workloads (None if it has a JetStream pull API)."""
    try:
        import natsio.client as nc_mod  # noqa: F401
    except ImportError:
        return "natsio is not installed (pip install natsio)"
    version = core.version_of("natsio")
    import importlib.util

    js_mods = [m for m in ("natsio.jetstream", "natsio.js") if importlib.util.find_spec(m) is not None]
    js_attrs = [a for a in ("jetstream", "js", "pull_subscribe", "fetch") if hasattr(nc_mod.NATSCore, a)]
    if not js_mods and not js_attrs:
        return (
            f"natsio {version} has no JetStream API (NATSCore offers publish/subscribe/request only; "
            "no pull consumer, no fetch, no consume)"
        )
    return f"natsio {version} has a JetStream API ({', '.join(js_mods + js_attrs)}) but this bench has no driver for it yet"


# =============================================================================== clients
#
# Every client binds to a consumer created by the runner (outside the timed part), runs the
# workload, then unbinds. fetch/consume return {"total_s": ...} like the other benches.


class Jssync(bench_js.Jssync):
    supports = ("fetch", "consume", "memory")

    def bind(self, stream: str, name: str) -> None:
        self.consumer = self.js.consumer(stream, name)

    def unbind(self) -> None:
        self.consumer = None

    def fetch(self, n: int, batch: int, size: int) -> dict[str, float]:
        fetch = self.consumer.fetch
        got = nbytes = 0
        t0 = pc()
        while got < n:
            r = fetch(min(batch, n - got), expires=EXPIRES)
            for m in r:
                m.ack()
                nbytes += len(m.data)
                got += 1
            if r.error is not None:
                raise RuntimeError(f"fetch ended with {r.error!r} after {got} messages")
        self.nc.flush(timeout=30)
        total = pc() - t0
        _check_bytes(nbytes, n, size)
        return {"total_s": total}

    def consume(self, n: int, batch: int, size: int) -> dict[str, float]:
        res = run_jssync_consume(self.nc, self.consumer, n, batch)
        _check_bytes(res.pop("nbytes"), n, size)
        return res


def run_jssync_consume(
    nc: Any, consumer: Any, n: int, batch: int, on_count: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """consume(handler) acking each message until ``n`` are acked, then a flush round trip."""
    done = threading.Event()
    state = {"count": 0, "nbytes": 0}
    failure: list[Any] = []

    def handler(m: Any) -> None:
        c = state["count"]
        if c >= n:
            return  # buffered extras after the target: left unacked
        m.ack()
        state["nbytes"] += len(m.data)
        state["count"] = c = c + 1
        if on_count is not None:
            on_count(c)
        if c == n:
            done.set()

    def on_event(e: Any) -> None:
        if e.__class__.__name__ in ("ConsumeTerminated", "CallbackError"):
            failure.append(e)
            done.set()

    t0 = pc()
    cc = consumer.consume(handler, max_messages=batch, on_event=on_event)
    try:
        if not done.wait(300):
            raise RuntimeError(f"consume: {state['count']} of {n} messages after 300 s")
        if failure and state["count"] < n:
            raise RuntimeError(f"consume failed after {state['count']} messages: {failure[0]!r}")
        nc.flush(timeout=30)
        total = pc() - t0
    finally:
        cc.stop()
        cc.wait(10)
    return {"total_s": total, "nbytes": state["nbytes"]}


def _check_bytes(nbytes: int, n: int, size: int) -> None:
    if nbytes != n * size:
        raise RuntimeError(f"received {nbytes} payload bytes, expected {n * size}")


async def _nats_py_loop(psub: Any, nc: Any, n: int, batch: int, handler: Callable[[Any], Any] | None) -> int:
    """nats-py: fetch batches and ack each message (through ``handler`` if given); then flush."""
    got = nbytes = 0
    while got < n:
        msgs = await psub.fetch(min(batch, n - got), timeout=EXPIRES)
        for m in msgs:
            if handler is None:
                await m.ack()
            else:
                await handler(m)
            nbytes += len(m.data)
            got += 1
    await nc.flush(timeout=30)
    return nbytes


async def _ack(m: Any) -> None:  # the nats-py "consume" handler
    await m.ack()


class NatsPyAsyncio(bench_js.NatsPyAsyncio):
    supports = ("fetch", "consume", "memory")

    def bind(self, stream: str, name: str) -> None:
        self.psub = self._run(self.js.pull_subscribe_bind(durable=name, stream=stream))

    def unbind(self) -> None:
        self._run(self.psub.unsubscribe())

    def _measure(self, n: int, batch: int, size: int, handler: Callable[[Any], Any] | None) -> dict[str, float]:
        t0 = pc()
        nbytes = self._run(_nats_py_loop(self.psub, self.nc, n, batch, handler))
        total = pc() - t0
        _check_bytes(nbytes, n, size)
        return {"total_s": total}

    def fetch(self, n: int, batch: int, size: int) -> dict[str, float]:
        return self._measure(n, batch, size, None)

    def consume(self, n: int, batch: int, size: int) -> dict[str, float]:
        return self._measure(n, batch, size, _ack)


class NatsPyThread(bench_js.NatsPyThread):
    supports = ("fetch", "consume")
    skip = {"memory": "same library as nats-py-asyncio; one thread hand-off per ack would make the memory run take minutes"}

    def bind(self, stream: str, name: str) -> None:
        self.psub = self.call(self.js.pull_subscribe_bind(durable=name, stream=stream))

    def unbind(self) -> None:
        self.call(self.psub.unsubscribe())

    def _measure(self, n: int, batch: int, size: int, handler: Callable[[Any], None] | None) -> dict[str, float]:
        fetch = self.psub.fetch
        call = self.call
        got = nbytes = 0
        t0 = pc()
        while got < n:
            for m in call(fetch(min(batch, n - got), timeout=EXPIRES)):
                if handler is None:
                    call(m.ack())
                else:
                    handler(m)
                nbytes += len(m.data)
                got += 1
        call(self.nc.flush(timeout=30))
        total = pc() - t0
        _check_bytes(nbytes, n, size)
        return {"total_s": total}

    def fetch(self, n: int, batch: int, size: int) -> dict[str, float]:
        return self._measure(n, batch, size, None)

    def consume(self, n: int, batch: int, size: int) -> dict[str, float]:
        # no consume API in nats-py: the plain thread's handler acks through the loop
        return self._measure(n, batch, size, lambda m: self.call(m.ack()))


class Natsio:
    """natsio (PyPI ``natsio``): skipped for every workload it has no pull API for."""

    name = "natsio"
    supports: tuple[str, ...] = ()

    def __init__(self) -> None:
        reason = natsio_skip_reason()
        self.skip = {w: reason for w in ("fetch", "consume", "memory")} if reason else {}

    def connect(self, url: str, window: int) -> None:
        pass

    def close(self) -> None:
        pass


CLIENTS: dict[str, Callable[[], Any]] = {
    "jssync": Jssync,
    "nats-py-asyncio": NatsPyAsyncio,
    "nats-py-thread": NatsPyThread,
    "natsio": Natsio,
}
WORKLOADS = ("fetch", "consume", "memory")


# =============================================================================== memory child


def child_main(spec: dict[str, Any]) -> int:
    """One memory run in this (fresh) process: consume ``count`` messages with ack, print JSON."""
    n = spec["count"]
    marks = {max(1, int(n * f)): f"{round(f * 100)}%" for f in MARKS}
    samples: dict[str, int] = {}
    rss_start = vmrss_kib()

    def on_count(c: int) -> None:
        label = marks.get(c)
        if label is not None:
            samples[label] = vmrss_kib()

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    if spec["client"] == "jssync":
        nc = jssync.connect(spec["url"], name="bench-pull-mem-jssync")
        consumer = nc.jetstream(timeout=10.0).consumer(spec["stream"], spec["consumer"])
        rss_bound = vmrss_kib()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        res = run_jssync_consume(nc, consumer, n, spec["batch"], on_count)
        nc.close()
    else:  # nats-py-asyncio: fetch loop, the RSS sampled by a counting handler
        count = [0]

        async def handler(m: Any) -> None:
            await m.ack()
            count[0] += 1
            on_count(count[0])

        async def run() -> dict[str, Any]:
            nonlocal rss_bound, ru0
            nc = await nats.connect(spec["url"], name="bench-pull-mem-nats-py")
            psub = await nc.jetstream(timeout=10.0).pull_subscribe_bind(durable=spec["consumer"], stream=spec["stream"])
            rss_bound = vmrss_kib()
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = pc()
            nbytes = await _nats_py_loop(psub, nc, n, spec["batch"], handler)
            total = pc() - t0
            await nc.close()
            return {"total_s": total, "nbytes": nbytes}

        rss_bound = 0
        res = asyncio.run(run())
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    _check_bytes(res["nbytes"], n, spec["size"])
    out = {
        "total_s": res["total_s"],
        "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
        "rss_start_kib": rss_start,
        "rss_bound_kib": rss_bound,
        "rss_kib": samples,
        "rss_end_kib": vmrss_kib(),
        "hwm_kib": vmrss_kib("VmHWM:"),  # peak RSS of this process image
        # ru_maxrss (KiB on Linux) is not per process image: after fork+exec Linux keeps the
        # parent's RSS at fork time as a floor, so it shows the benchmark parent's size.
        "maxrss_kib": ru1.ru_maxrss,
    }
    print(json.dumps(out), flush=True)
    return 0


# =============================================================================== runner


class Runner(core.Runner):
    """bench_core's runner (interleaved rounds, noise probes, repeats) with a fresh consumer
    created before and deleted after every measured run."""

    def __init__(self, args: argparse.Namespace, url: str, server_pid: int | None) -> None:
        super().__init__(argparse.Namespace(**{**vars(args), "clients": []}), url, server_pid)
        self.args = args
        self.clients = [CLIENTS[name]() for name in args.clients]
        self.skipped: list[tuple[str, str, str]] = []  # (workload, client, reason)
        self.memory: dict[str, dict[str, Any]] = {}
        self.serial = 0
        self.stream = STREAM
        self.bound: Any = None

    # -- streams and consumers ---------------------------------------------------------

    def connect_admin(self) -> None:
        self.admin = jssync.connect(self.url, name="bench-pull-admin")
        self.ajs = self.admin.jetstream(timeout=30.0)

    def load_stream(self, stream: str, subject: str, n: int, size: int) -> None:
        """(Re)create a file stream holding ``n`` messages of ``size`` B (jssync publish_async)."""
        try:
            self.ajs.delete_stream(stream)
        except jssync.errors.NatsError:
            pass
        self.ajs.create_stream(name=stream, subjects=[subject], storage="file", num_replicas=1)
        payload = b"x" * size
        publish_async = self.ajs.publish_async
        t0 = pc()
        for _ in range(n):
            publish_async(subject, payload)  # futures not kept: the count check below covers errors
        self.ajs.publish_async_complete(timeout=600)
        held = self.ajs.stream_info(stream).state.messages
        if held != n:
            raise RuntimeError(f"stream {stream} holds {held} messages, expected {n}")
        self.log(f"loaded {n:,} x {size} B into {stream} in {pc() - t0:.1f} s")

    def new_consumer(self, stream: str, tag: str) -> str:
        self.serial += 1
        name = f"bench_{tag.replace('-', '_')}_{self.serial}"
        self.ajs.create_consumer(stream, durable_name=name, ack_policy="explicit", deliver_policy="all")
        return name

    def finish_consumer(self, stream: str, name: str, acked: int) -> None:
        """Check that the first ``acked`` messages are acknowledged on the server, then delete."""
        try:
            deadline = pc() + 10
            while True:
                floor = self.ajs.consumer_info(stream, name).ack_floor.consumer_seq
                if floor >= acked:
                    break
                if pc() > deadline:
                    raise RuntimeError(f"consumer {name}: ack floor {floor} after the run, expected {acked}")
                time.sleep(0.05)
        finally:
            self.ajs.delete_consumer(stream, name)

    def with_consumer(self, c: Any, fn: Callable[[], Any], acked: int) -> Any:
        name = self.new_consumer(self.stream, c.name)
        c.bind(self.stream, name)
        try:
            out = fn()
        finally:
            c.unbind()
        self.finish_consumer(self.stream, name, acked)
        return out

    def measure(self, client: Any, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return self.with_consumer(client, lambda: core.Runner.measure(self, client, fn), self.args.msgs)  # type: ignore[no-any-return]

    def brief(self, workload: str, res: dict[str, Any]) -> str:
        return f"{self.args.msgs / res['total_s']:>12,.0f} msgs/s"

    # -- workloads ----------------------------------------------------------------------

    def note_skips(self, workload: str) -> None:
        for c in self.clients:
            reason = getattr(c, "skip", {}).get(workload)
            if reason:
                self.skipped.append((workload, c.name, reason))
                self.log(f"[{workload}] {c.name} skipped: {reason}")

    def run_memory(self) -> None:
        a = self.args
        clients = [c for c in self.clients if "memory" in c.supports]
        if not clients:
            return
        self.stream = MEM_STREAM
        self.load_stream(MEM_STREAM, MEM_SUBJECT, a.mem_msgs, a.mem_size)
        for c in clients:
            name = self.new_consumer(MEM_STREAM, c.name)
            spec = {"client": c.name, "url": self.url, "stream": MEM_STREAM, "consumer": name,
                    "count": a.mem_msgs, "batch": a.batch, "size": a.mem_size}
            sys0, srv0 = core.system_cpu(), core.proc_cpu_s(self.server_pid)
            ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            w0 = pc()
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                                  capture_output=True, text=True, timeout=1800)
            wall = pc() - w0
            ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            sys1, srv1 = core.system_cpu(), core.proc_cpu_s(self.server_pid)
            if proc.returncode != 0:
                self.ajs.delete_consumer(MEM_STREAM, name)
                raise RuntimeError(f"memory run of {c.name} failed:\n{proc.stderr[-3000:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            self.finish_consumer(MEM_STREAM, name, a.mem_msgs)
            if sys0 is not None and sys1 is not None:
                own = (ch1.ru_utime - ch0.ru_utime) + (ch1.ru_stime - ch0.ru_stime)
                if srv0 is not None and srv1 is not None:
                    own += srv1 - srv0
                res["foreign_cores"] = round(max(0.0, (sys1[0] - sys0[0]) - own) / wall, 3)
            self.memory[c.name] = res
            self.log(
                f"[memory] {c.name:<18} {a.mem_msgs / res['total_s']:>10,.0f} msgs/s  peak RSS "
                f"{res['hwm_kib'] / 1024:.1f} MiB  other {res.get('foreign_cores', float('nan')):.2f} cores"
            )

    def run_all(self) -> None:
        a = self.args
        self.wait_quiet()
        self.connect_admin()
        try:
            for c in self.clients:
                c.connect(self.url, 1000)
            try:
                if "fetch" in a.workloads or "consume" in a.workloads:
                    self.load_stream(STREAM, SUBJECT, a.msgs, a.size)
                for workload in ("fetch", "consume"):
                    if workload not in a.workloads:
                        continue
                    self.note_skips(workload)
                    self.rounds(
                        workload,
                        lambda c, w=workload: self.with_consumer(
                            c, lambda: getattr(c, w)(a.warmup_msgs, a.batch, a.size), a.warmup_msgs
                        ),
                        lambda c, w=workload: getattr(c, w)(a.msgs, a.batch, a.size),
                    )
                if "memory" in a.workloads:
                    self.note_skips("memory")
                    self.run_memory()
            finally:
                problems = []
                for c in self.clients:
                    try:
                        c.close()
                    except Exception as exc:  # noqa: BLE001 - keep closing the others
                        problems.append(f"closing {c.name}: {exc!r}")
                for text in problems:
                    self.log(text)
        finally:
            self.admin.close()

    def summary(self) -> dict[str, Any]:
        n = self.args.msgs
        derived = {
            "msgs_per_s": lambda r: n / r["total_s"],
            "us_per_msg": lambda r: r["total_s"] / n * 1e6,
            "cpu_us_per_msg": lambda r: r["client_cpu_s"] / n * 1e6,
        }
        out: dict[str, Any] = {}
        for workload, per_client in self.results.items():
            for name, runs in per_client.items():
                row = {key: core.summarize([f(r) for r in runs]) for key, f in derived.items()}
                row.update(
                    {key: core.summarize([r[key] for r in runs]) for key in ("probe_us", "server_cpu_s", "foreign_cores")
                     if runs and key in runs[0]}
                )
                row["repeated_runs"] = len([r for r in runs if r.get("attempts", 1) > 1])
                row["disturbed_runs"] = len([r for r in runs if r.get("noise", 0.0) > 1.0])
                out.setdefault(workload, {})[name] = row
        return out


# =============================================================================== report


def peer_rows(summary: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(workload, peer, jssync median msgs/s / peer median msgs/s)."""
    out = []
    for workload, per in summary.items():
        if "jssync" not in per:
            continue
        mine = per["jssync"]["msgs_per_s"]["median"]
        out.extend((workload, p, mine / row["msgs_per_s"]["median"]) for p, row in per.items() if p != "jssync")
    return out


def per_round(results: dict[str, Any]) -> list[tuple[str, str, list[float]]]:
    out = []
    for workload, per in results.items():
        if "jssync" not in per:
            continue
        for p, runs in per.items():
            if p != "jssync":
                out.append((workload, p, [b["total_s"] / a["total_s"] for a, b in zip(per["jssync"], runs)]))
    return out


def targets(summary: dict[str, Any], skipped: list[tuple[str, str, str]]) -> list[str]:
    out = []
    for workload, target in TARGETS.items():
        per = summary.get(workload, {})
        if "jssync" not in per:
            continue
        mine = per["jssync"]["msgs_per_s"]["median"]
        peers = {p: row["msgs_per_s"]["median"] for p, row in per.items() if p != "jssync"}
        if peers:
            best = max(peers, key=lambda p: peers[p])
            r = mine / peers[best]
            out.append(
                f"target {workload} >= {target}x the best peer measured ({best}, {peers[best]:,.0f} msgs/s): "
                f"{r:.2f}x -> {'MET' if r >= target else 'MISSED'}"
            )
        quoted_client, quoted = QUOTED[workload]
        if quoted_client not in per:
            why = next((r for w, c, r in skipped if w == workload and c == quoted_client), "not selected")
            r = mine / quoted
            out.append(
                f"  vs the {quoted_client} figure quoted in the issue (~{quoted:,} msgs/s, NOT measured here: {why}): "
                f"{r:.2f}x -> {'MET' if r >= target else 'MISSED'} (different run, compare with care)"
            )
    return out


def render(facts: dict[str, Any], args: argparse.Namespace, runner: Runner, summary: dict[str, Any]) -> str:
    lines = ["== machine", *(f"  {k:<14} {v}" for k, v in facts.items())]
    w = lines.append
    w(
        f"== config  msgs={args.msgs} size={args.size} B batch={args.batch} expires={EXPIRES} s runs={args.runs} "
        f"mem_msgs={args.mem_msgs} mem_size={args.mem_size} B (file streams; fresh durable consumer, ack explicit, per run)"
    )
    titles = {
        "fetch": f"fetch({args.batch}) loop + ack each: {args.msgs:,} x {args.size} B, until the acks are flushed",
        "consume": f"consume with ack in the handler (max_messages {args.batch}): {args.msgs:,} x {args.size} B",
    }
    for workload, title in titles.items():
        if workload not in summary:
            continue
        w("")
        w(f"== {title}")
        w(f"  {'client':<18} {'msgs/s':>30} {'us/msg':>22} {'client CPU us/msg':>18} {'server CPU s':>13}")
        for name, row in summary[workload].items():
            srv = row.get("server_cpu_s", {}).get("median", float("nan"))
            w(
                f"  {name:<18} {core.fmt_range(row['msgs_per_s'], ',.0f'):>30} {core.fmt_range(row['us_per_msg'], '.1f'):>22}"
                f" {row['cpu_us_per_msg']['median']:>18.1f} {srv:>13.2f}"
            )
    if runner.memory:
        w("")
        w(
            f"== memory: consume {args.mem_msgs:,} x {args.mem_size} B with ack, one subprocess per client "
            "(MiB; VmRSS at start, after connect+bind, at 10/50/90 % progress; peak = VmHWM; ru_maxrss, which Linux "
            "floors at the parent's RSS after fork+exec, in the JSON)"
        )
        w(f"  {'client':<18} {'msgs/s':>10} {'CPU us/msg':>10} {'start':>7} {'bound':>7} {'10%':>7} {'50%':>7} {'90%':>7} "
          f"{'peak':>7} {'10->90%':>8}  verdict")
        for name, m in runner.memory.items():
            rss = {k: v / 1024 for k, v in m["rss_kib"].items()}
            growth = rss.get("90%", 0.0) - rss.get("10%", 0.0)
            flat = growth <= max(5.0, 0.05 * rss.get("10%", 0.0))
            w(
                f"  {name:<18} {args.mem_msgs / m['total_s']:>10,.0f} {m['cpu_s'] / args.mem_msgs * 1e6:>10.1f} "
                f"{m['rss_start_kib'] / 1024:>7.1f} {m['rss_bound_kib'] / 1024:>7.1f} "
                + " ".join(f"{rss.get(k, float('nan')):>7.1f}" for k in ("10%", "50%", "90%"))
                + f" {m['hwm_kib'] / 1024:>7.1f} {growth:>+8.1f}  {'flat' if flat else 'GROWS'}"
                + f"  (other {m.get('foreign_cores', float('nan')):.2f} cores)"
            )
        w("  (flat = RSS grew by at most max(5 MiB, 5 %) between 10 % and 90 % of the messages)")
    if runner.skipped:
        w("")
        w("== skipped")
        for workload, name, reason in runner.skipped:
            w(f"  {workload:<8} {name:<18} {reason}")
    noise = [(wl, n, row) for wl, per in summary.items() for n, row in per.items() if "foreign_cores" in row]
    if noise:
        w("")
        w(
            f"== disturbance: other = CPU of other processes (cores); runs with other > {args.noise_limit} or a CPU probe "
            f"> {args.probe_limit}x the usual were repeated up to {args.retries} times (runs over {args.retry_max_s} s are not)"
        )
        for wl, name, row in noise:
            fc = row["foreign_cores"]
            w(
                f"  {wl:<8} {name:<18} other {fc['median']:.2f} [{fc['min']:.2f}..{fc['max']:.2f}] cores  "
                f"repeated {row['repeated_runs']}  still disturbed {row['disturbed_runs']}"
            )
    rows = peer_rows(summary)
    if rows:
        w("")
        w("== ratios jssync / peer (median msgs/s, higher is better for jssync)")
        for workload, peer, r in rows:
            w(f"  {workload:<8} vs {peer:<18} {r:6.2f}x")
    pr = per_round(runner.results)
    if pr:
        w("")
        w("== per-round ratios jssync / peer (both measured within seconds of each other)")
        for workload, peer, vals in pr:
            w(f"  {workload:<8} vs {peer:<18} " + " ".join(f"{v:.2f}" for v in vals) + f"   median {statistics.median(vals):.2f}")
    ts = targets(summary, runner.skipped)
    if ts:
        w("")
        w("== issue targets")
        for t in ts:
            w(f"  {t}")
    return "\n".join(lines)


# =============================================================================== profile


def _stats(out: io.StringIO, title: str, prof: cProfile.Profile | None, top: int) -> None:
    out.write(f"\n--- {title}\n")
    if prof is None:
        out.write("(no profile)\n")
    else:
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)


def profile_jssync(runner: Runner, args: argparse.Namespace) -> str:
    """cProfile of jssync fetch (caller thread) and consume (handler thread), with the I/O thread."""
    out = io.StringIO()
    out.write("== cProfile of jssync fetch and consume (tottime order; the profiler inflates per-call cost)\n")
    runner.connect_admin()
    runner.stream = STREAM
    try:
        for workload in ("fetch", "consume"):
            c = Jssync()
            c.client_class = core._ProfiledJssync
            c.connect(runner.url, 1000)
            try:
                if workload == "fetch":
                    prof = cProfile.Profile()

                    def run() -> None:
                        prof.enable()
                        c.fetch(args.msgs, args.batch, args.size)
                        prof.disable()
                else:
                    prof = cProfile.Profile()
                    c_handler = c  # the handler thread enables its own profile on its first message

                    def run() -> None:
                        def on_count(k: int) -> None:
                            if k == 1:
                                prof.enable()
                            elif k == args.msgs:
                                prof.disable()

                        r = run_jssync_consume(c_handler.nc, c_handler.consumer, args.msgs, args.batch, on_count)
                        _check_bytes(r["nbytes"], args.msgs, args.size)

                runner.with_consumer(c, run, args.msgs)
            finally:
                c.close()
            thread = "caller thread" if workload == "fetch" else "consume handler thread"
            _stats(out, f"{workload}: {thread}", prof, args.profile_top)
            _stats(out, f"{workload}: I/O thread", core._ProfiledJssync.io_profile, args.profile_top)
    finally:
        runner.admin.close()
    return out.getvalue()


# =============================================================================== main

# (flag, type, default, help) of the noise options, as in bench_core.py / bench_js.py
NOISE_OPTIONS = (
    ("--noise-limit", float, 0.3, "repeat a run during which other processes used more cores (default 0.3)"),
    ("--probe-limit", float, 1.5, "repeat a run whose CPU probe is this much slower than the usual (default 1.5)"),
    ("--wait-quiet", float, 0.0, "first wait up to this many seconds for a quiet machine"),
    ("--retries", int, 3, "repeats of a noisy run; the quietest is kept (default 3)"),
    ("--retry-max-s", float, 8.0, "runs longer than this are not repeated (default 8 s)"),
    ("--retry-pause", float, 2.0, "seconds to wait before repeating a noisy run"),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--msgs", type=int, default=100_000, help="messages per fetch/consume run (default 100000)")
    p.add_argument("--size", type=int, default=128, help="payload bytes for fetch/consume (default 128)")
    p.add_argument("--batch", type=int, default=500, help="fetch batch / consume max_messages (default 500)")
    p.add_argument("--runs", type=int, default=5, help="measured runs per client and workload (default 5)")
    p.add_argument("--warmup-msgs", type=int, default=10_000, help="warm-up messages per client (default 10000)")
    p.add_argument("--mem-msgs", type=int, default=1_000_000, help="messages of the memory run (default 1000000)")
    p.add_argument("--mem-size", type=int, default=64, help="payload bytes of the memory run (default 64)")
    p.add_argument("--server", metavar="URL", help="use this running JetStream server instead of starting one")
    p.add_argument("--json", metavar="FILE", help="write machine facts, raw runs and summary as JSON")
    p.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated subset of: {', '.join(CLIENTS)}")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}")
    p.add_argument("--profile", action="store_true", help="also print a cProfile of jssync fetch and consume")
    p.add_argument("--profile-top", type=int, default=18)
    for flag, typ, default, help_ in NOISE_OPTIONS:
        p.add_argument(flag, type=typ, default=default, help=help_)
    p.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    p.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)  # internal: one memory run
    args = p.parse_args(argv)
    if args.child:
        return args
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [c for c in args.clients if c not in CLIENTS] + [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown client or workload: {', '.join(unknown)}")
    if min(args.msgs, args.size, args.batch, args.runs, args.mem_msgs, args.mem_size) < 1 or args.warmup_msgs > args.msgs:
        p.error("counts and sizes must be >= 1, and --warmup-msgs <= --msgs")
    if nats is None and any(c.startswith("nats-py") for c in args.clients):
        p.error("nats-py is not installed (pip install nats-py) - or pass --clients jssync")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(json.loads(args.child))
    signal.signal(signal.SIGTERM, bench_js._sigterm)
    with contextlib.ExitStack() as stack:
        if args.server:
            url, server_pid, where = args.server, None, f"external {args.server}"
        else:
            from jssync.server import NatsServer

            srv = NatsServer(jetstream=True, name="bench-pull")
            srv.start()
            stack.callback(srv.cleanup)
            url, server_pid, where = srv.url, srv.pid, "started by the benchmark (JetStream on, file store in a temp dir)"
        facts = {**core.machine_facts(url, not args.server), "server": where, "natsio": core.version_of("natsio")}
        runner = Runner(args, url, server_pid)
        started = pc()
        runner.run_all()
        facts.update(loadavg_end=[round(x, 2) for x in os.getloadavg()], wall_s=round(pc() - started, 1))
        summary = runner.summary()
        print(render(facts, args, runner, summary), flush=True)
        prof_text = profile_jssync(runner, args) if args.profile else ""
        print(f"\n{prof_text}" if prof_text else "", end="", flush=True)
        if args.json:
            keys = ("msgs", "size", "batch", "runs", "warmup_msgs", "mem_msgs", "mem_size", "clients", "workloads")
            doc = {
                "config": {k: getattr(args, k) for k in keys},
                "facts": facts,
                "summary": summary,
                "memory": runner.memory,
                "skipped": [{"workload": w, "client": c, "reason": r} for w, c, r in runner.skipped],
                "ratios": [{"workload": w, "vs": p, "ratio": r} for w, p, r in peer_rows(summary)],
                "per_round_ratios": [{"workload": w, "vs": p, "ratios": v} for w, p, v in per_round(runner.results)],
                "targets": targets(summary, runner.skipped),
                "runs": runner.results,
                "profile": prof_text or None,
            }
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
