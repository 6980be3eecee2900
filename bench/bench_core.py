#!/usr/bin/env python
"""Core NATS benchmark: jssync side by side with nats-py, against one nats-server, in one run.

Run on demand (not in CI), from the repository root with the dev virtualenv::

    .venv/bin/python bench/bench_core.py                 # defaults: 200k x 128 B, 5k requests, 5 runs
    .venv/bin/python bench/bench_core.py --runs 7 --json out.json
    .venv/bin/python bench/bench_core.py --server nats://127.0.0.1:4222   # an existing server

Clients measured (each on its own connection to the same server):

* ``jssync``            the blocking client (``jssync.connect``), called from the main thread.
* ``nats-py-asyncio``   nats-py used as intended: ``await nc.publish(...)`` in a coroutine.
* ``nats-py-thread``    nats-py as a non-asyncio program uses it today: a private event loop on a
                        background thread, every call made from the main thread as
                        ``asyncio.run_coroutine_threadsafe(coro, loop).result()``.
* ``nats-py-thread-submit`` (publish only) the same, but the main thread only submits each
                        ``publish`` coroutine and waits for the last future: the fastest way to
                        drive nats-py from a thread, at the price of not seeing per-call errors.
* ``raw-socket-floor``  (publish and request only) not a client: one Python thread writing the
                        protocol to a blocking socket, no library. The floor of this machine,
                        shown for reference and left out of the ratios.

Workloads:

* ``pub``  core publish of ``--msgs`` messages of ``--size`` bytes to a subject nobody listens to;
           timed from the first publish until a flush (PING/PONG) round trip completes, i.e. the
           server has taken every message.
* ``req``  ``--requests`` sequential request/reply round trips of ``--size`` bytes, answered by a
           raw-socket echo responder in a separate process (bench/_responder.py); per-call
           latency percentiles and requests/s.
* ``sub``  subscriber receive throughput: a raw-socket publisher in a separate process floods
           ``--sub-msgs`` messages to a subject only the measured client listens to; timed from
           the flood command until the measured client's application code has the last message.

Each workload is warmed up on every client, then measured ``--runs`` times with the clients
interleaved (the starting client rotates each round). The tables show the median and the
min..max over the runs, and the ratios jssync / nats-py.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import io
import json
import math
import os
import platform
import pstats
import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import jssync  # noqa: E402
from jssync.client import Client as _JssyncClient  # noqa: E402

try:
    import nats  # noqa: E402
except ImportError:  # pragma: no cover - nats-py is a dev dependency
    nats = None  # type: ignore[assignment]

pc = time.perf_counter
pc_ns = time.perf_counter_ns

PUB_SUBJECT = "bench.pub"
REQ_SUBJECT = "bench.echo"
TARGET_PUB_RATIO = 1.5  # jssync publish >= 1.5x nats-py asyncio
TARGET_REQ_SLACK = 1.15  # jssync request latency within 15% of nats-py


# =============================================================================== peer processes


class Peer:
    """A bench/_responder.py process (``respond`` or ``flood`` mode)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "_responder.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        line = self._readline(15.0)
        if line != "ready":
            self.close()
            raise RuntimeError(f"peer {args[0]} did not start: {line!r}")

    def _readline(self, timeout: float) -> str:
        stdout = self.proc.stdout
        assert stdout is not None
        result: list[str] = []
        t = threading.Thread(target=lambda: result.append(stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not result:
            raise RuntimeError(f"peer did not answer within {timeout} s")
        return result[0].strip()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_line(self, expected: str, timeout: float = 120.0) -> None:
        line = self._readline(timeout)
        if line != expected:
            raise RuntimeError(f"peer said {line!r}, expected {expected!r}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.write("exit\n")
                    self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()


class Flooder(Peer):
    def __init__(self, url: str) -> None:
        super().__init__("flood", url)

    def start(self, subject: str, count: int, size: int) -> None:
        self.send(f"flood {subject} {count} {size}")

    def wait_done(self) -> None:
        self.wait_line("done")


# =============================================================================== clients


class BenchClient:
    """One client under test. ``pub``/``req``/``sub`` return raw measurements."""

    name = ""
    supports: tuple[str, ...] = ("pub", "req", "sub")

    def connect(self, url: str) -> None:
        raise NotImplementedError

    def pub(self, n: int, payload: bytes) -> dict[str, float]:
        raise NotImplementedError

    def req(self, n: int, payload: bytes) -> dict[str, Any]:
        raise NotImplementedError

    def sub_prepare(self, subject: str) -> None:
        raise NotImplementedError

    def sub(self, n: int, size: int, flooder: Flooder) -> dict[str, float]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Jssync(BenchClient):
    name = "jssync"

    def connect(self, url: str) -> None:
        self.nc = jssync.connect(url, name="bench-jssync")

    def pub(self, n: int, payload: bytes) -> dict[str, float]:
        publish = self.nc.publish
        subject = PUB_SUBJECT
        t0 = pc()
        for _ in range(n):
            publish(subject, payload)
        t1 = pc()
        self.nc.flush(timeout=120)
        t2 = pc()
        return {"loop_s": t1 - t0, "total_s": t2 - t0}

    def req(self, n: int, payload: bytes) -> dict[str, Any]:
        request = self.nc.request
        subject = REQ_SUBJECT
        lat = [0] * n
        t0 = pc()
        for i in range(n):
            s = pc_ns()
            m = request(subject, payload, timeout=5)
            lat[i] = pc_ns() - s
            if len(m.data) != len(payload):
                raise RuntimeError("bad echo")
        return {"total_s": pc() - t0, "lat_ns": lat}

    def sub_prepare(self, subject: str) -> None:
        self.subject = subject
        self.sub_ = self.nc.subscribe(subject)
        self.nc.flush(timeout=5)

    def sub(self, n: int, size: int, flooder: Flooder) -> dict[str, float]:
        next_msg = self.sub_.next_msg
        nbytes = 0
        t0 = pc()
        flooder.start(self.subject, n, size)
        for _ in range(n):
            nbytes += len(next_msg(timeout=60).data)
        t1 = pc()
        flooder.wait_done()
        if nbytes != n * size:
            raise RuntimeError("bad byte count")
        return {"total_s": t1 - t0}

    def close(self) -> None:
        self.nc.close()


class NatsPyAsyncio(BenchClient):
    """nats-py on an event loop owned by the main thread; each measurement is one coroutine."""

    name = "nats-py-asyncio"

    def connect(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(url, name="bench-nats-py-asyncio"))

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def pub(self, n: int, payload: bytes) -> dict[str, float]:
        nc = self.nc

        async def run() -> dict[str, float]:
            publish = nc.publish
            subject = PUB_SUBJECT
            t0 = pc()
            for _ in range(n):
                await publish(subject, payload)
            t1 = pc()
            await nc.flush(timeout=120)
            t2 = pc()
            return {"loop_s": t1 - t0, "total_s": t2 - t0}

        return self._run(run())  # type: ignore[no-any-return]

    def req(self, n: int, payload: bytes) -> dict[str, Any]:
        nc = self.nc

        async def run() -> dict[str, Any]:
            request = nc.request
            subject = REQ_SUBJECT
            lat = [0] * n
            t0 = pc()
            for i in range(n):
                s = pc_ns()
                m = await request(subject, payload, timeout=5)
                lat[i] = pc_ns() - s
                if len(m.data) != len(payload):
                    raise RuntimeError("bad echo")
            return {"total_s": pc() - t0, "lat_ns": lat}

        return self._run(run())  # type: ignore[no-any-return]

    def sub_prepare(self, subject: str) -> None:
        self.subject = subject
        self.count = 0
        self.target = 0
        self.nbytes = 0
        self.t_end = 0.0
        self.done: asyncio.Future[None] | None = None

        async def cb(msg: Any) -> None:
            self.count += 1
            self.nbytes += len(msg.data)
            if self.count == self.target:
                self.t_end = pc()
                if self.done is not None and not self.done.done():
                    self.done.set_result(None)

        async def setup() -> None:
            await self.nc.subscribe(subject, cb=cb)
            await self.nc.flush(timeout=5)

        self._run(setup())

    def sub(self, n: int, size: int, flooder: Flooder) -> dict[str, float]:
        async def run() -> float:
            self.count = 0
            self.nbytes = 0
            self.target = n
            self.done = self.loop.create_future()
            t0 = pc()
            flooder.start(self.subject, n, size)
            await asyncio.wait_for(self.done, 120)
            return self.t_end - t0

        total = self._run(run())
        flooder.wait_done()
        if self.nbytes != n * size:
            raise RuntimeError("bad byte count")
        return {"total_s": total}

    def close(self) -> None:
        self._run(self.nc.close())
        self.loop.close()


class NatsPyThread(BenchClient):
    """nats-py driven from a plain thread: its event loop runs on a private background thread."""

    name = "nats-py-thread"

    def __init__(self, submit_only: bool = False) -> None:
        self.submit_only = submit_only
        if submit_only:
            self.name = "nats-py-thread-submit"
            self.supports = ("pub",)

    def connect(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"{self.name}-loop", daemon=True)
        self.thread.start()
        self.nc = self.call(nats.connect(url, name=f"bench-{self.name}"))

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def pub(self, n: int, payload: bytes) -> dict[str, float]:
        publish = self.nc.publish
        loop = self.loop
        submit = asyncio.run_coroutine_threadsafe
        subject = PUB_SUBJECT
        t0 = pc()
        if self.submit_only:
            fut = None
            for _ in range(n):
                fut = submit(publish(subject, payload), loop)
            if fut is not None:
                fut.result()
        else:
            for _ in range(n):
                submit(publish(subject, payload), loop).result()
        t1 = pc()
        self.call(self.nc.flush(timeout=120))
        t2 = pc()
        return {"loop_s": t1 - t0, "total_s": t2 - t0}

    def req(self, n: int, payload: bytes) -> dict[str, Any]:
        request = self.nc.request
        loop = self.loop
        submit = asyncio.run_coroutine_threadsafe
        subject = REQ_SUBJECT
        lat = [0] * n
        t0 = pc()
        for i in range(n):
            s = pc_ns()
            m = submit(request(subject, payload, timeout=5), loop).result()
            lat[i] = pc_ns() - s
            if len(m.data) != len(payload):
                raise RuntimeError("bad echo")
        return {"total_s": pc() - t0, "lat_ns": lat}

    def sub_prepare(self, subject: str) -> None:
        self.subject = subject
        q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.q = q

        async def cb(msg: Any) -> None:
            q.put(msg)  # hand the message to the plain thread

        async def setup() -> None:
            await self.nc.subscribe(subject, cb=cb)
            await self.nc.flush(timeout=5)

        self.call(setup())

    def sub(self, n: int, size: int, flooder: Flooder) -> dict[str, float]:
        get = self.q.get
        nbytes = 0
        t0 = pc()
        flooder.start(self.subject, n, size)
        for _ in range(n):
            nbytes += len(get(timeout=60).data)
        t1 = pc()
        flooder.wait_done()
        if nbytes != n * size:
            raise RuntimeError("bad byte count")
        return {"total_s": t1 - t0}

    def close(self) -> None:
        self.call(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class RawFloor(BenchClient):
    """Not a client: the cost floor of this machine for one Python thread speaking the protocol
    over a blocking socket with no library, no validation, no thread hand-off. Excluded from the
    ratios; it shows how much of each figure the server, the kernel and the responder take."""

    name = "raw-socket-floor"
    supports = ("pub", "req")

    def connect(self, url: str) -> None:
        parts = urlsplit(url if "://" in url else "nats://" + url)
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self._line()  # INFO
        self.sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":true,"no_responders":true}\r\n'
            b"SUB _RAWINBOX.* 1\r\nPING\r\n"
        )
        self._pong()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(262144)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _pong(self) -> None:
        while True:
            line = self._line()
            if line == b"PONG":
                return
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise ConnectionError(line.decode())

    def pub(self, n: int, payload: bytes) -> dict[str, float]:
        sendall = self.sock.sendall
        subject = PUB_SUBJECT.encode()
        out: list[bytes] = []
        append = out.append
        t0 = pc()
        for i in range(n):
            append(b"PUB %s %d\r\n%s\r\n" % (subject, len(payload), payload))
            if len(out) >= 512:
                sendall(b"".join(out))
                out.clear()
        sendall(b"".join(out) + b"PING\r\n")
        t1 = pc()
        self._pong()
        t2 = pc()
        return {"loop_s": t1 - t0, "total_s": t2 - t0}

    def req(self, n: int, payload: bytes) -> dict[str, Any]:
        sendall = self.sock.sendall
        recv = self.sock.recv
        head = b"PUB " + REQ_SUBJECT.encode() + b" _RAWINBOX.%d " + str(len(payload)).encode() + b"\r\n"
        lat = [0] * n
        t0 = pc()
        for i in range(n):
            s = pc_ns()
            sendall(head % i + payload + b"\r\n")
            while True:
                line = self._line()
                if line.startswith(b"MSG "):
                    size = int(line.rsplit(b" ", 1)[1])
                    while len(self.buf) < size + 2:
                        self.buf += recv(262144)
                    self.buf = self.buf[size + 2 :]
                    break
                if line == b"PING":
                    sendall(b"PONG\r\n")
            lat[i] = pc_ns() - s
        return {"total_s": pc() - t0, "lat_ns": lat}

    def close(self) -> None:
        self.sock.close()


CLIENTS: dict[str, Callable[[], BenchClient]] = {
    "jssync": Jssync,
    "nats-py-asyncio": NatsPyAsyncio,
    "nats-py-thread": NatsPyThread,
    "nats-py-thread-submit": lambda: NatsPyThread(submit_only=True),
    "raw-socket-floor": RawFloor,
}


# =============================================================================== machine facts


def server_info(url: str) -> dict[str, Any]:
    parts = urlsplit(url if "://" in url else "nats://" + url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=5) as s:
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    line = buf.split(b"\r\n", 1)[0]
    if not line.startswith(b"INFO "):
        return {}
    info: dict[str, Any] = json.loads(line[5:])
    return info


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def git_rev() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "jscore", "jssync"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return rev + ("+local-changes" if dirty else "") if rev else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def machine_facts(url: str, own_server: bool) -> dict[str, Any]:
    info = server_info(url)
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "nats_server": info.get("version", "?"),
        "server": "started by the benchmark (jetstream off)" if own_server else f"external {url}",
        "jssync": f"{getattr(jssync, '__version__', '?')} from {Path(jssync.__file__).parent.parent} (git {git_rev()})",
        "nats_py": version_of("nats-py"),
        "msgspec": version_of("msgspec"),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def system_cpu() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine so far (Linux /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tck = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq = f[:7]
    steal = f[7] if len(f) > 7 else 0
    return (user + nice + system + irq + softirq) / tck, steal / tck


_PROBE_PAYLOAD = b"x" * 128


def cpu_probe(n: int = 30_000) -> float:
    """Microseconds per iteration of a fixed pure-Python loop: this machine's speed right now.

    The machine may be shared (other processes, other VMs on the host); a probe much slower than
    the best one seen marks a run as disturbed even when no local process shows up in /proc/stat.
    """
    t0 = pc()
    out: list[bytes] = []
    append = out.append
    for _ in range(n):
        append(b"PUB %s %d\r\n%s\r\n" % (b"bench.pub", 128, _PROBE_PAYLOAD))
    return (pc() - t0) / n * 1e6


def proc_cpu_s(pid: int | None) -> float | None:
    """utime+stime of a process in seconds (Linux /proc), None if unavailable."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


# =============================================================================== statistics


def pct(sorted_vals: list[int], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return float(sorted_vals[k])


def summarize(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# =============================================================================== runner


class Runner:
    def __init__(self, args: argparse.Namespace, url: str, server_pid: int | None) -> None:
        self.args = args
        self.url = url
        self.server_pid = server_pid
        self.payload = b"x" * args.size
        self.clients = [CLIENTS[name]() for name in args.clients]
        self.results: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.peers: list[Peer] = []
        self.probes: list[float] = []

    def log(self, text: str) -> None:
        if not self.args.quiet:
            print(text, file=sys.stderr, flush=True)

    def measure(self, client: BenchClient, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        gc.collect()
        probe0 = cpu_probe()
        ours = [self.server_pid, *(p.proc.pid for p in self.peers)]
        sys0 = system_cpu()
        ours0 = [proc_cpu_s(pid) for pid in ours]
        cpu0 = time.process_time()
        w0 = pc()
        res = fn()
        wall = pc() - w0
        res["wall_s"] = round(wall, 3)
        res["client_cpu_s"] = time.process_time() - cpu0
        ours1 = [proc_cpu_s(pid) for pid in ours]
        sys1 = system_cpu()
        res["probe_us"] = round(max(probe0, cpu_probe()), 4)
        self.probes.append(res["probe_us"])
        if ours0[0] is not None and ours1[0] is not None:
            res["server_cpu_s"] = ours1[0] - ours0[0]
        if sys0 is not None and sys1 is not None:
            own = res["client_cpu_s"] + sum(b - a for a, b in zip(ours0, ours1) if a is not None and b is not None)
            # CPU used by everything else on the machine during the run, in cores (jiffy-coarse)
            res["foreign_cores"] = round(max(0.0, (sys1[0] - sys0[0]) - own) / wall, 3)
            res["steal_cores"] = round((sys1[1] - sys0[1]) / wall, 3)
        return res

    def rounds(self, workload: str, warm: Callable[[BenchClient], Any], run: Callable[[BenchClient], Any]) -> None:
        clients = [c for c in self.clients if workload in c.supports]
        if not clients:
            return
        self.log(f"[{workload}] warm-up")
        for c in clients:
            warm(c)
        out = self.results.setdefault(workload, {c.name: [] for c in clients})
        k = len(clients)
        for r in range(self.args.runs):
            order = clients[r % k :] + clients[: r % k]
            for c in order:
                best: dict[str, Any] | None = None
                for attempt in range(1 + self.args.retries):
                    res = self.measure(c, functools.partial(run, c))
                    res["load1"] = round(os.getloadavg()[0], 2)
                    score = self.noise_score(res)
                    res["noise"] = round(score, 2)
                    noisy = score > 1.0
                    # a long run is not repeated: it averages the disturbance anyway
                    again = noisy and attempt < self.args.retries and res["wall_s"] <= self.args.retry_max_s
                    if best is None or score < best["noise"]:
                        best = res
                    self.log(
                        f"[{workload}] run {r + 1}/{self.args.runs} {c.name:<22} {self.brief(workload, res)}"
                        f"  other {res.get('foreign_cores', float('nan')):.2f} cores"
                        f"  probe {res['probe_us']:.3f} us"
                        + ("  (disturbed, again)" if again else "  (disturbed)" if noisy else "")
                    )
                    if not again:
                        break
                    time.sleep(self.args.retry_pause)
                assert best is not None
                best["attempts"] = attempt + 1
                out[c.name].append(best)

    def probe_baseline(self) -> float:
        """The machine's normal speed: the first quartile of every probe so far (a single lucky
        fast probe must not make every later run look disturbed)."""
        ordered = sorted(self.probes)
        return ordered[len(ordered) // 4] if ordered else float("inf")

    def noise_score(self, res: dict[str, Any]) -> float:
        """> 1.0: the run was disturbed (other processes busy, or the machine itself slow)."""
        a = self.args
        foreign = res.get("foreign_cores", 0.0) / a.noise_limit if a.noise_limit > 0 else 0.0
        slow = (res["probe_us"] / self.probe_baseline()) / a.probe_limit if a.probe_limit > 0 else 0.0
        return max(foreign, slow)

    def brief(self, workload: str, res: dict[str, Any]) -> str:
        a = self.args
        if workload == "pub":
            return f"{a.msgs / res['total_s']:>12,.0f} msgs/s"
        if workload == "sub":
            return f"{a.sub_msgs / res['total_s']:>12,.0f} msgs/s"
        lat = sorted(res["lat_ns"])
        return f"median {pct(lat, 0.5) / 1000:8.1f} us  p99 {pct(lat, 0.99) / 1000:8.1f} us"

    def wait_quiet(self) -> None:
        """Seed the probe baseline; with --wait-quiet, wait for other load to drop first."""
        a = self.args
        deadline = pc() + a.wait_quiet
        while True:
            sys0 = system_cpu()
            cpu0 = time.process_time()
            w0 = pc()
            probes = []
            for _ in range(8):
                probes.append(cpu_probe())
                time.sleep(0.1)
            sys1 = system_cpu()
            wall = pc() - w0
            self.probes.extend(probes)
            if sys0 is None or sys1 is None:
                return
            ours = time.process_time() - cpu0  # the idle server's few ticks count as other load here
            other = max(0.0, (sys1[0] - sys0[0]) - ours) / wall
            if other <= a.noise_limit or pc() >= deadline:
                self.log(f"other load before start: {other:.2f} cores; CPU probe baseline {self.probe_baseline():.3f} us")
                return
            self.log(f"waiting for a quiet machine: other load {other:.2f} cores")
            time.sleep(2.0)

    def run_all(self) -> None:
        a = self.args
        p = self.payload
        self.wait_quiet()
        for c in self.clients:
            c.connect(self.url)
        try:
            if "pub" in a.workloads:
                self.rounds("pub", lambda c: c.pub(a.warmup_msgs, p), lambda c: c.pub(a.msgs, p))
            if "req" in a.workloads:
                responder = Peer("respond", self.url, REQ_SUBJECT)
                self.peers = [responder]
                try:
                    self.rounds("req", lambda c: c.req(a.warmup_requests, p), lambda c: c.req(a.requests, p))
                finally:
                    self.peers = []
                    responder.close()
            if "sub" in a.workloads:
                flooder = Flooder(self.url)
                self.peers = [flooder]
                try:
                    for c in self.clients:
                        if "sub" in c.supports:
                            c.sub_prepare(f"bench.flood.{c.name}")
                    self.rounds(
                        "sub",
                        lambda c: c.sub(a.warmup_msgs, a.size, flooder),
                        lambda c: c.sub(a.sub_msgs, a.size, flooder),
                    )
                finally:
                    self.peers = []
                    flooder.close()
        finally:
            for c in self.clients:
                try:
                    c.close()
                except Exception as exc:  # noqa: BLE001 - report, keep closing the others
                    self.log(f"closing {c.name}: {exc!r}")

    # ------------------------------------------------------------------ summary

    def summary(self) -> dict[str, Any]:
        a = self.args
        s: dict[str, Any] = {}
        for workload, per_client in self.results.items():
            s[workload] = {}
            for name, runs in per_client.items():
                if workload in ("pub", "sub"):
                    n = a.msgs if workload == "pub" else a.sub_msgs
                    row: dict[str, Any] = {
                        "msgs_per_s": summarize([n / r["total_s"] for r in runs]),
                        "mb_per_s": summarize([n * a.size / r["total_s"] / 1e6 for r in runs]),
                        "cpu_us_per_msg": summarize([r["client_cpu_s"] / n * 1e6 for r in runs]),
                    }
                    if workload == "pub":
                        row["call_rate_per_s"] = summarize([n / r["loop_s"] for r in runs])
                else:
                    lats = [sorted(r["lat_ns"]) for r in runs]
                    row = {
                        "median_us": summarize([pct(lat, 0.50) / 1000 for lat in lats]),
                        "p90_us": summarize([pct(lat, 0.90) / 1000 for lat in lats]),
                        "p99_us": summarize([pct(lat, 0.99) / 1000 for lat in lats]),
                        "req_per_s": summarize([a.requests / r["total_s"] for r in runs]),
                        "cpu_us_per_req": summarize([r["client_cpu_s"] / a.requests * 1e6 for r in runs]),
                    }
                if runs and "server_cpu_s" in runs[0]:
                    row["server_cpu_s"] = summarize([r["server_cpu_s"] for r in runs])
                if runs and "foreign_cores" in runs[0]:
                    row["foreign_cores"] = summarize([r["foreign_cores"] for r in runs])
                    row["steal_cores"] = summarize([r["steal_cores"] for r in runs])
                row["repeated_runs"] = sum(1 for r in runs if r.get("attempts", 1) > 1)
                row["disturbed_runs"] = sum(1 for r in runs if r.get("noise", 0.0) > 1.0)
                row["probe_us"] = summarize([r["probe_us"] for r in runs])
                s[workload][name] = row
        return s


# =============================================================================== report


def fmt_range(d: dict[str, float], spec: str) -> str:
    return f"{d['median']:{spec}} [{d['min']:{spec}}..{d['max']:{spec}}]"


def ratios(summary: dict[str, Any]) -> list[tuple[str, str, float, str]]:
    """(what, vs, ratio, note) rows: jssync figure / nats-py figure."""
    rows: list[tuple[str, str, float, str]] = []
    peers = ["nats-py-asyncio", "nats-py-thread", "nats-py-thread-submit"]
    for workload, metric, label, note in (
        ("pub", "msgs_per_s", "publish msgs/s", "higher is better for jssync"),
        ("req", "median_us", "request median latency", "lower is better for jssync"),
        ("req", "p99_us", "request p99 latency", "lower is better for jssync"),
        ("req", "req_per_s", "requests/s", "higher is better for jssync"),
        ("sub", "msgs_per_s", "receive msgs/s", "higher is better for jssync"),
    ):
        per = summary.get(workload, {})
        if "jssync" not in per:
            continue
        for peer in peers:
            if peer in per:
                rows.append((label, peer, per["jssync"][metric]["median"] / per[peer][metric]["median"], note))
    return rows


def paired(results: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, str, list[float]]]:
    """Per-round ratios jssync / peer (the two measured in the same round, close in time)."""
    rows: list[tuple[str, str, list[float]]] = []
    for workload, label in (("pub", "publish msgs/s"), ("req", "request median latency"), ("sub", "receive msgs/s")):
        per = results.get(workload, {})
        if "jssync" not in per:
            continue
        for peer in ("nats-py-asyncio", "nats-py-thread"):
            if peer not in per:
                continue
            if workload == "req":
                vals = [
                    pct(sorted(a["lat_ns"]), 0.5) / pct(sorted(b["lat_ns"]), 0.5)
                    for a, b in zip(per["jssync"], per[peer])
                ]
            else:
                vals = [b["total_s"] / a["total_s"] for a, b in zip(per["jssync"], per[peer])]
            rows.append((label, peer, vals))
    return rows


def verdicts(summary: dict[str, Any]) -> list[str]:
    out = []
    pub = summary.get("pub", {})
    if "jssync" in pub and "nats-py-asyncio" in pub:
        r = pub["jssync"]["msgs_per_s"]["median"] / pub["nats-py-asyncio"]["msgs_per_s"]["median"]
        ok = r >= TARGET_PUB_RATIO
        out.append(
            f"target publish >= {TARGET_PUB_RATIO}x nats-py-asyncio: {r:.2f}x -> {'MET' if ok else 'MISSED'}"
        )
    req = summary.get("req", {})
    for peer in ("nats-py-asyncio", "nats-py-thread"):
        if "jssync" in req and peer in req:
            r = req["jssync"]["median_us"]["median"] / req[peer]["median_us"]["median"]
            ok = r <= TARGET_REQ_SLACK
            out.append(
                f"target request median latency within {round((TARGET_REQ_SLACK - 1) * 100)}% of {peer}: "
                f"{r:.2f}x -> {'MET' if ok else 'MISSED'}"
            )
    return out


def render(
    facts: dict[str, Any], args: argparse.Namespace, summary: dict[str, Any], results: dict[str, Any]
) -> str:
    lines: list[str] = []
    w = lines.append
    w("== machine")
    for k, v in facts.items():
        w(f"  {k:<14} {v}")
    w(
        f"== config  msgs={args.msgs} sub_msgs={args.sub_msgs} size={args.size} B requests={args.requests} "
        f"runs={args.runs} (median [min..max] over runs; MB = 10^6 payload bytes)"
    )
    if "pub" in summary:
        w("")
        w(f"== core publish: {args.msgs:,} x {args.size} B, first publish -> flush round trip done")
        w(f"  {'client':<22} {'msgs/s':>30} {'MB/s':>24} {'publish() calls/s':>30} {'client CPU us/msg':>20}")
        for name, row in summary["pub"].items():
            w(
                f"  {name:<22} {fmt_range(row['msgs_per_s'], ',.0f'):>30} {fmt_range(row['mb_per_s'], '.1f'):>24} "
                f"{fmt_range(row['call_rate_per_s'], ',.0f'):>30} {row['cpu_us_per_msg']['median']:>20.2f}"
            )
    if "req" in summary:
        w("")
        w(f"== request/reply: {args.requests:,} sequential x {args.size} B, raw-socket echo responder process")
        w(
            f"  {'client':<22} {'median us':>22} {'p90 us':>22} {'p99 us':>24} {'req/s':>24} "
            f"{'client CPU us/req':>18}"
        )
        for name, row in summary["req"].items():
            w(
                f"  {name:<22} {fmt_range(row['median_us'], '.1f'):>22} {fmt_range(row['p90_us'], '.1f'):>22} "
                f"{fmt_range(row['p99_us'], '.1f'):>24} {fmt_range(row['req_per_s'], ',.0f'):>24} "
                f"{row['cpu_us_per_req']['median']:>18.1f}"
            )
    if "sub" in summary:
        w("")
        w(f"== subscriber receive: {args.sub_msgs:,} x {args.size} B flooded by a raw-socket publisher process")
        w(f"  {'client':<22} {'msgs/s':>30} {'MB/s':>24} {'client CPU us/msg':>20}")
        for name, row in summary["sub"].items():
            w(
                f"  {name:<22} {fmt_range(row['msgs_per_s'], ',.0f'):>30} {fmt_range(row['mb_per_s'], '.1f'):>24} "
                f"{row['cpu_us_per_msg']['median']:>20.2f}"
            )
    noise = [
        (w, name, row)
        for w, per in summary.items()
        for name, row in per.items()
        if "foreign_cores" in row
    ]
    if noise:
        w("")
        w(
            f"== disturbance: 'other' = CPU used by processes other than this one, the server and the peer "
            f"(cores); 'CPU probe' = us per iteration of a fixed Python loop around each run. A run with other > "
            f"{args.noise_limit} or a probe > {args.probe_limit}x the usual probe (first quartile) was repeated up to "
            f"{args.retries} times, keeping the least disturbed"
        )
        for wl, name, row in noise:
            fc, st = row["foreign_cores"], row["steal_cores"]
            pr = row["probe_us"]
            w(
                f"  {wl:<4} {name:<22} other {fc['median']:.2f} [{fc['min']:.2f}..{fc['max']:.2f}] cores  "
                f"steal {st['median']:.2f}  CPU probe {pr['median']:.3f} [{pr['min']:.3f}..{pr['max']:.3f}] us  "
                f"repeated {row['repeated_runs']}  still disturbed {row['disturbed_runs']}"
            )
    rs = ratios(summary)
    if rs:
        w("")
        w("== ratios jssync / nats-py (medians)")
        for label, peer, r, note in rs:
            w(f"  {label:<24} vs {peer:<22} {r:6.2f}x   ({note})")
    pr = paired(results, args)
    if pr:
        w("")
        w("== per-round ratios jssync / nats-py (each round measures both within seconds of each other)")
        for label, peer, vals in pr:
            w(f"  {label:<24} vs {peer:<16} " + " ".join(f"{v:.2f}" for v in vals) + f"   median {statistics.median(vals):.2f}")
    vs = verdicts(summary)
    if vs:
        w("")
        w("== issue targets")
        for v in vs:
            w(f"  {v}")
    return "\n".join(lines)


# =============================================================================== profile


class _ProfiledJssync(_JssyncClient):
    """A jssync Client whose I/O thread runs under its own cProfile (benchmark use only)."""

    io_profile: cProfile.Profile | None = None

    def _io_main(self) -> None:
        prof = cProfile.Profile()
        type(self).io_profile = prof
        prof.enable()
        try:
            super()._io_main()
        finally:
            prof.disable()


def profile_jssync(url: str, args: argparse.Namespace) -> str:
    """cProfile of the jssync publish and request workloads: the caller thread and the I/O thread.

    cProfile slows call-heavy code several fold; read it for the distribution, not the speed.
    """
    payload = b"x" * args.size
    out = io.StringIO()
    out.write("== cProfile of jssync (tottime order; the profiler inflates per-call cost)\n")
    responder = Peer("respond", url, REQ_SUBJECT)
    try:
        for workload in ("pub", "req"):
            nc = _ProfiledJssync(url, name="bench-jssync-profile")
            nc._start()
            try:
                main_prof = cProfile.Profile()
                if workload == "pub":
                    for _ in range(2000):
                        nc.publish(PUB_SUBJECT, payload)
                    nc.flush(timeout=10)
                    main_prof.enable()
                    for _ in range(args.msgs):
                        nc.publish(PUB_SUBJECT, payload)
                    nc.flush(timeout=120)
                    main_prof.disable()
                else:
                    for _ in range(200):
                        nc.request(REQ_SUBJECT, payload, timeout=5)
                    main_prof.enable()
                    for _ in range(args.requests):
                        nc.request(REQ_SUBJECT, payload, timeout=5)
                    main_prof.disable()
            finally:
                nc.close()
            for thread, prof in (("caller thread", main_prof), ("I/O thread", _ProfiledJssync.io_profile)):
                out.write(f"\n--- {workload}: {thread}\n")
                if prof is None:
                    out.write("(no profile)\n")
                    continue
                st = pstats.Stats(prof, stream=out)
                st.sort_stats("tottime").print_stats(args.profile_top)
    finally:
        responder.close()
    return out.getvalue()


# =============================================================================== main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--msgs", type=int, default=200_000, help="messages per publish run (default 200000)")
    p.add_argument("--size", type=int, default=128, help="payload bytes (default 128)")
    p.add_argument("--requests", type=int, default=5_000, help="requests per request/reply run (default 5000)")
    p.add_argument("--sub-msgs", type=int, default=None, help="messages per receive run (default: --msgs)")
    p.add_argument("--runs", type=int, default=5, help="measured runs per client and workload (default 5)")
    p.add_argument("--warmup-msgs", type=int, default=20_000, help="warm-up messages per client (default 20000)")
    p.add_argument("--warmup-requests", type=int, default=500, help="warm-up requests per client (default 500)")
    p.add_argument("--server", metavar="URL", help="use this running server instead of starting one")
    p.add_argument("--json", metavar="FILE", help="write machine facts, raw runs and summary as JSON")
    p.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"comma-separated subset of: {', '.join(CLIENTS)} (default: all)",
    )
    p.add_argument("--workloads", default="pub,req,sub", help="comma-separated subset of pub,req,sub")
    p.add_argument("--profile", action="store_true", help="also print a cProfile of jssync pub and req")
    p.add_argument("--profile-top", type=int, default=18, help="functions per profile (default 18)")
    p.add_argument(
        "--noise-limit",
        type=float,
        default=0.3,
        help="a run during which other processes used more than this many cores is repeated (default 0.3)",
    )
    p.add_argument(
        "--probe-limit",
        type=float,
        default=1.5,
        help="a run whose CPU probe is this many times slower than the usual probe (first quartile) is repeated (default 1.5)",
    )
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="before starting, wait up to this long for other load below --noise-limit")
    p.add_argument("--retries", type=int, default=3, help="repeats of a noisy run; the quietest is kept (default 3)")
    p.add_argument(
        "--retry-max-s", type=float, default=5.0, help="runs longer than this are not repeated (default 5 s)"
    )
    p.add_argument("--retry-pause", type=float, default=2.0, help="seconds to wait before repeating a noisy run")
    p.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    args = p.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [c for c in args.clients if c not in CLIENTS] + [w for w in args.workloads if w not in ("pub", "req", "sub")]
    if unknown:
        p.error(f"unknown client or workload: {', '.join(unknown)}")
    if args.sub_msgs is None:
        args.sub_msgs = args.msgs
    if min(args.msgs, args.size, args.requests, args.sub_msgs, args.runs) < 1:
        p.error("--msgs, --size, --requests, --sub-msgs and --runs must be >= 1")
    if nats is None and any(c.startswith("nats-py") for c in args.clients):
        p.error("nats-py is not installed (pip install nats-py) - or pass --clients jssync")
    return args


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwind through the finally blocks: stop the peers and the server


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    server = None
    if args.server:
        url = args.server
        server_pid = None
    else:
        from jssync.server import NatsServer

        server = NatsServer(jetstream=False, name="bench")
        server.start()
        url = server.url
        server_pid = server.pid
    try:
        facts = machine_facts(url, server is not None)
        runner = Runner(args, url, server_pid)
        t0 = pc()
        runner.run_all()
        facts["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        facts["wall_s"] = round(pc() - t0, 1)
        summary = runner.summary()
        print(render(facts, args, summary, runner.results), flush=True)
        prof_text = ""
        if args.profile:
            prof_text = profile_jssync(url, args)
            print("\n" + prof_text, flush=True)
        if args.json:
            doc = {
                "facts": facts,
                "config": {
                    k: getattr(args, k)
                    for k in ("msgs", "sub_msgs", "size", "requests", "runs", "warmup_msgs", "warmup_requests", "clients", "workloads")
                },
                "summary": summary,
                "ratios": [{"what": r[0], "vs": r[1], "ratio": r[2]} for r in ratios(summary)],
                "per_round_ratios": [{"what": r[0], "vs": r[1], "ratios": r[2]} for r in paired(runner.results, args)],
                "targets": verdicts(summary),
                "runs": {
                    w: {
                        c: [{k: v for k, v in r.items() if k != "lat_ns"} for r in runs]
                        for c, runs in per.items()
                    }
                    for w, per in runner.results.items()
                },
                "profile": prof_text or None,
            }
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    finally:
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
