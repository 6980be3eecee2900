"""The soak itself: a loaded R3 stream on a 3-node loopback cluster, faults at random (seeded), then
the ledger check (:mod:`tests.soak.ledger`).

Workers, each on its own client (those marked *proxied* connect through one
:class:`~tests.support.proxy.FaultProxy` per node, ``ignore_discovered_servers``):

* ``sync`` (proxied): ``js.publish`` with a msg id; an ambiguous outcome is published again once
  with the same id, as a careful application does;
* ``async``: ``js.publish_async`` with msg ids in batches, every future's ``result()`` checked;
* ``bulk`` (proxied): the Spark writers' engine (:class:`jssync.spark.PartitionWriter` over
  :class:`jssync.bulk.BulkPublisher`) without Spark: small partitions of rows, a failed
  partition written again whole with the same msg ids (a task retry);
* ``consume``: an R3 durable consumer, ``consume()`` with acks;
* ``fetch`` (proxied): another R3 durable, ``fetch()`` in a loop, ``ack_sync`` for every message;
* ``ordered`` (proxied): an ordered consumer over the whole stream, ``messages().next()``.

Faults, one at a time, at seeded random moments: ``kill`` (SIGKILL a node, restart it on its
store after a while), ``pause`` (SIGSTOP / SIGCONT), ``cut`` (every proxied connection reset),
``stream_stepdown`` and ``consumer_stepdown`` (``$JS.API.*.LEADER.STEPDOWN``).

Every blocking call is timed against its own bound (:class:`~tests.soak.ledger.CallTimes`).
"""

from __future__ import annotations

import json
import random
from array import array
import threading
import time
import traceback
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from jscore.errors import NatsError, NoMessagesError
from jscore.models import StorageType
from jscore.pull import fetch_grace
from jssync import Client, connect
from jssync.server import NatsCluster
from jssync.spark._config import WriteOptions
from jssync.spark._writer import PartitionWriter
from tests.support.proxy import FaultProxy

from .ledger import (
    ACKED_NO_SEQ,
    AMBIGUOUS,
    ASYNC,
    BULK,
    FAILED,
    SYNC,
    UNRESOLVED,
    CallTimes,
    ConsumerLog,
    Ledger,
    PublisherLedger,
    check,
    parse_payload,
)

__all__ = ["SoakConfig", "run_soak", "memory_kib"]

STREAM = "SOAK"
SUBJECT = "soak"
FAULT_KINDS = ("kill", "pause", "cut", "stream_stepdown", "consumer_stepdown")
_PAD = b"x" * 96

CLIENT_OPTIONS: dict[str, Any] = {
    "ping_interval": 1.0,
    "max_pings_out": 2,
    "reconnect_wait": 0.25,
    "reconnect_jitter": 0.1,
    "connect_timeout": 2.0,
    "max_reconnect_attempts": -1,
}


@dataclass
class SoakConfig:
    seconds: float = 300.0  # load with faults (the check and the drain come after)
    seed: int = 1
    margin: float = 0.25  # a blocking call may outlive its bound by this much
    warmup: float = 3.0  # no fault in the first seconds
    quiet_tail: float = 5.0  # nor in the last ones (the recovery of the last fault is measured)
    fault_gap: tuple[float, float] = (2.0, 6.0)  # between two faults
    hold: tuple[float, float] = (1.0, 4.0)  # a killed / paused node stays so long
    weights: dict[str, float] = field(
        default_factory=lambda: {"kill": 1.0, "pause": 1.0, "cut": 1.5, "stream_stepdown": 1.5, "consumer_stepdown": 1.5}
    )
    js_timeout: float = 5.0  # the JetStream contexts' timeout (sync publish, API calls)
    async_batch: int = 100
    async_every: float = 0.25
    sync_every: float = 0.005
    bulk_rows: int = 200
    bulk_every: float = 0.4
    bulk_ack_timeout: float = 5.0
    bulk_retries: int = 3
    fetch_batch: int = 200
    fetch_sync_ack_every: int = 20  # every n-th message fetched is acked with ack_sync, the others with ack
    fetch_expires: float = 2.0
    consume_expires: float = 5.0
    consume_heartbeat: float = 1.0
    ordered_next: float = 2.0
    drain_timeout: float = 90.0  # after the load: consumers must have seen everything by then


def memory_kib() -> dict[str, int]:
    """VmHWM / VmRSS of this process (KiB), from /proc/self/status."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


class _Worker:
    """A thread with its client, its success times (for recovery) and its crash, if any."""

    def __init__(self, soak: _Soak, name: str, proxied: bool) -> None:
        self.soak = soak
        self.name = name
        self.proxied = proxied
        self.ok_times = array("d")  # (8 bytes a success: the ledger must stay small on long runs)
        self.crash: str | None = None
        self.client: Client | None = None
        self.rotation = soak.next_rotation()
        self.thread = threading.Thread(target=self._main, name=f"soak-{name}", daemon=True)

    def connect(self) -> Client:
        servers = self.soak.proxy_urls if self.proxied else self.soak.cluster.urls
        k = self.rotation
        servers = servers[k:] + servers[:k]  # (the workers do not all start on the first node)
        extra: dict[str, Any] = {"ignore_discovered_servers": True} if self.proxied else {}
        self.client = connect(servers, name=f"soak-{self.name}", **CLIENT_OPTIONS, **extra)
        return self.client

    def ok(self) -> None:
        self.ok_times.append(time.monotonic())

    def timed(self, name: str, bound: float, fn: Callable[[], Any], what: str = "") -> Any:
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            t1 = time.monotonic()
            self.soak.times.record(name, t1 - t0, bound, t0 - self.soak.t0, what)

    def _main(self) -> None:
        try:
            self.run()
        except BaseException:  # noqa: BLE001 - a worker that dies is a finding
            self.crash = traceback.format_exc()

    def run(self) -> None:
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        return self.soak.stop_publishing.is_set()


# ----------------------------------------------------------------------------- publishers


class _SyncPublisher(_Worker):
    def __init__(self, soak: _Soak) -> None:
        super().__init__(soak, "sync", proxied=True)
        self.ledger = PublisherLedger(SYNC)

    def run(self) -> None:
        cfg = self.soak.cfg
        js = self.connect().jetstream(timeout=cfg.js_timeout)
        led = self.ledger
        while not self.stopping:
            n = led.attempt()
            payload = b"s%d|%s" % (n, _PAD)
            mid = f"s{n}"
            outcome = ""
            for attempt in range(2):  # an ambiguous outcome is published again once, same id
                try:
                    ack = self.timed(
                        "js.publish", cfg.js_timeout,
                        lambda: js.publish(f"{SUBJECT}.s", payload, msg_id=mid, timeout=cfg.js_timeout), mid,
                    )
                except NatsError as exc:
                    kind = led.error(exc)
                    if kind == "failed" and outcome == "ambiguous":
                        break  # a refusal of the re-send says nothing about the first send
                    outcome = kind
                    if kind == "failed":
                        break
                    continue
                if outcome == "ambiguous":
                    led.resolved_by_retry += 1
                outcome = "acked"
                led.settle(n, ack.seq)
                self.ok()
                break
            if outcome == "ambiguous":
                led.settle(n, AMBIGUOUS)
            elif outcome == "failed":
                led.settle(n, FAILED)
            time.sleep(cfg.sync_every)


class _AsyncPublisher(_Worker):
    def __init__(self, soak: _Soak) -> None:
        super().__init__(soak, "async", proxied=False)
        self.ledger = PublisherLedger(ASYNC)
        self.unsettled = 0

    def run(self) -> None:
        cfg = self.soak.cfg
        js = self.connect().jetstream(timeout=cfg.js_timeout)
        js.configure_publish(ack_timeout=cfg.js_timeout, retry_attempts=2)
        budget = cfg.js_timeout * 3
        settle = budget + 30.0  # a future settles by its re-send budget (timers stop while disconnected)
        led = self.ledger
        while not self.stopping:
            started = time.monotonic()
            futs = []
            for _ in range(cfg.async_batch):
                n = led.attempt()
                mid = f"a{n}"
                payload = b"a%d|%s" % (n, _PAD)
                try:
                    fut = self.timed(
                        "js.publish_async", cfg.js_timeout,
                        lambda: js.publish_async(f"{SUBJECT}.a", payload, msg_id=mid, timeout=cfg.js_timeout), mid,
                    )
                except NatsError as exc:
                    led.settle(n, FAILED if led.error(exc) == "failed" else AMBIGUOUS)
                    continue
                futs.append((n, fut))
            for n, fut in futs:
                try:
                    ack = self.timed("PubAckFuture.result", settle, lambda: fut.result(timeout=settle), fut.msg_id or "")
                except NatsError as exc:
                    if not fut.done():
                        self.unsettled += 1
                        led.settle(n, AMBIGUOUS)
                        continue
                    led.settle(n, FAILED if led.error(exc) == "failed" else AMBIGUOUS)
                    continue
                led.settle(n, ack.seq)
                self.ok()
            time.sleep(max(0.0, cfg.async_every - (time.monotonic() - started)))


class _BulkPublisher(_Worker):
    """Partitions of ``bulk_rows`` rows through the Spark writers' engine; a failed partition is
    written again whole with the same msg ids (as Spark retries a task), three attempts in all."""

    def __init__(self, soak: _Soak) -> None:
        super().__init__(soak, "bulk", proxied=True)
        self.ledger = PublisherLedger(BULK)
        self.attempts = 0
        self.retried = 0

    def run(self) -> None:
        cfg = self.soak.cfg
        client = self.connect()
        opts = WriteOptions(
            subject=f"{SUBJECT}.b", ack_timeout=cfg.bulk_ack_timeout, retries=cfg.bulk_retries, max_pending=4000
        )
        # finish() settles every row within the re-send budget of its last trouble, which starts
        # at most one ack timeout after finish() began (timers stop while disconnected).
        bound = cfg.bulk_ack_timeout * (cfg.bulk_retries + 2)
        led = self.ledger
        p = 0
        while not self.stopping:
            started = time.monotonic()
            rows = [b"b%d.%d|%s" % (p, r, _PAD) for r in range(cfg.bulk_rows)]
            led.settle_partition(p, len(rows), UNRESOLVED)
            outcome = "ambiguous"
            for attempt in range(3):
                self.attempts += 1
                if attempt:
                    self.retried += 1
                writer = PartitionWriter(client, opts, write_id=self.soak.write_id, partition_id=p)
                try:
                    writer.add_all(rows)
                    self.timed("PartitionWriter.finish", bound, writer.finish, f"partition {p}")
                except NatsError as exc:
                    led.error(exc)
                    writer.close()
                    continue
                outcome = "acked"
                break
            if outcome == "acked":
                led.settle_partition(p, len(rows), ACKED_NO_SEQ)
                self.ok()
            else:
                led.settle_partition(p, len(rows), AMBIGUOUS)  # the attempts may have stored some rows
            p += 1
            time.sleep(max(0.0, cfg.bulk_every - (time.monotonic() - started)))


# ----------------------------------------------------------------------------- consumers


def _record(worker: _Worker, log: ConsumerLog, msg: Any) -> None:
    log.saw(msg.metadata.sequence.stream, parse_payload(msg.data))
    worker.ok()


class _Consume(_Worker):
    def __init__(self, soak: _Soak) -> None:
        super().__init__(soak, "consume", proxied=False)
        self.log = ConsumerLog("consume")
        self.notes: dict[str, int] = {}
        self.note_log: list[str] = []

    def on_event(self, event: Any) -> None:
        name = type(event).__name__
        self.notes[name] = self.notes.get(name, 0) + 1
        if len(self.note_log) < 100:
            self.note_log.append(f"{time.monotonic() - self.soak.t0:.2f} {event!r}"[:300])

    def handler(self, msg: Any) -> None:
        _record(self, self.log, msg)
        msg.ack()

    def run(self) -> None:
        cfg = self.soak.cfg
        js = self.connect().jetstream(timeout=cfg.js_timeout)
        consumer = js.consumer(STREAM, "C_CONSUME")
        cc = consumer.consume(
            self.handler, max_messages=500, expires=cfg.consume_expires, heartbeat=cfg.consume_heartbeat,
            on_event=self.on_event,
        )
        self.soak.stop_consuming.wait()
        self.timed("ConsumeContext.stop", 30.0, cc.stop)
        if cc.error is not None:
            self.log.error(cc.error)


class _Fetch(_Worker):
    """``fetch()`` in a loop; ``ack()`` for every message, ``ack_sync()`` for every 20th (so
    both are exercised and the loop keeps up with the publishers)."""

    def __init__(self, soak: _Soak) -> None:
        super().__init__(soak, "fetch", proxied=True)
        self.log = ConsumerLog("fetch")
        self.error_log: list[str] = []
        self.empty_streak = 0  # fetches in a row that ended with nothing and no error
        self.worst_empty_streak = 0

    def _note(self, exc: BaseException) -> None:
        self.log.error(exc)
        line = f"{time.monotonic() - self.soak.t0:.2f} {type(exc).__name__}: {exc}"[:200]
        if len(self.error_log) < 60:
            self.error_log.append(line)
        else:
            self.error_log[40 + len(self.error_log) % 20] = line  # (the first 40, then a ring)

    def run(self) -> None:
        cfg = self.soak.cfg
        js = self.connect().jetstream(timeout=cfg.js_timeout)
        consumer = js.consumer(STREAM, "C_FETCH", bind=True)
        bound = cfg.fetch_expires + fetch_grace(cfg.fetch_expires)
        stop = self.soak.stop_consuming
        k = 0
        while not stop.is_set():
            t0 = time.monotonic()
            busy = 0.0  # time spent in our own processing (acks), not the fetch's
            try:
                result = consumer.fetch(cfg.fetch_batch, expires=cfg.fetch_expires)
                got = 0
                for msg in result:
                    got += 1
                    b0 = time.monotonic()
                    _record(self, self.log, msg)
                    k += 1
                    try:
                        if k % cfg.fetch_sync_ack_every:
                            msg.ack()
                        else:
                            self.timed("JsMsg.ack_sync", 2.0, lambda: msg.ack_sync(timeout=2.0))
                    except NatsError as exc:
                        self._note(exc)  # redelivered after ack_wait
                    busy += time.monotonic() - b0
                if result.error is not None:
                    self._note(result.error)
                    time.sleep(0.1)  # (no responders, a leader change ...: a short pause, as an application would)
                elif not got:
                    self.empty_streak += 1
                    self.worst_empty_streak = max(self.worst_empty_streak, self.empty_streak)
                if got:
                    self.empty_streak = 0
            except NatsError as exc:
                self._note(exc)
                time.sleep(0.1)
            finally:
                t1 = time.monotonic()
                self.soak.times.record("Consumer.fetch", t1 - t0 - busy, bound, t0 - self.soak.t0)


class _Ordered(_Worker):
    def __init__(self, soak: _Soak) -> None:
        super().__init__(soak, "ordered", proxied=True)
        self.log = ConsumerLog("ordered", ordered=True)
        self.restarts = 0

    def run(self) -> None:
        cfg = self.soak.cfg
        js = self.connect().jetstream(timeout=cfg.js_timeout)
        stop = self.soak.stop_consuming
        last = 0
        while not stop.is_set():
            oc = js.ordered_consumer(STREAM, deliver_policy="by_start_sequence", opt_start_seq=last + 1) if last else (
                js.ordered_consumer(STREAM)
            )
            stream = oc.messages(expires=5.0, heartbeat=1.0)
            try:
                while not stop.is_set():
                    try:
                        msg = self.timed("OrderedMessageStream.next", cfg.ordered_next,
                                         lambda: stream.next(timeout=cfg.ordered_next))
                    except NoMessagesError:
                        continue
                    _record(self, self.log, msg)
                    last = msg.metadata.sequence.stream
            except NatsError as exc:
                # The ordered consumer ended with an error: its contract is to survive faults,
                # so this is a finding; go on from the next sequence to keep checking the rest.
                self.log.error(exc)
                self.restarts += 1
            finally:
                self.timed("OrderedMessageStream.stop", 30.0, stream.stop)


# ----------------------------------------------------------------------------- stall probe


def _runqueue_wait_ns() -> int:
    """Time this thread spent runnable but not running (waiting for a CPU), from the kernel."""
    try:
        with open("/proc/thread-self/schedstat") as fh:
            return int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


class _Probe:
    """Sleeps 10 ms at a time and records how late it wakes: when this process is not given a
    CPU (a loaded machine) or the GIL (a thread holding it), every call's wake-up is late by as
    much. Each stall over 50 ms is kept with how much of it the kernel says was spent waiting
    for a CPU."""

    def __init__(self, soak: _Soak) -> None:
        self.soak = soak
        self.stalls: list[tuple[float, float, float]] = []  # (start, seconds late, of it waiting for a CPU)
        self.worst = 0.0
        self.thread = threading.Thread(target=self.run, name="soak-probe", daemon=True)

    def run(self) -> None:
        done = self.soak.stop_consuming
        while not done.is_set():
            rq0 = _runqueue_wait_ns()
            t0 = time.monotonic()
            time.sleep(0.01)
            late = time.monotonic() - t0 - 0.01
            if late > 0.05:
                self.stalls.append((t0, late, (_runqueue_wait_ns() - rq0) / 1e9))
            self.worst = max(self.worst, late)

    def during(self, start: float, end: float) -> tuple[float, float]:
        """(the stalls, and the CPU wait in them) overlapping [start, end] (monotonic times), summed."""
        late_sum = rq_sum = 0.0
        for t, late, rq in self.stalls:
            if t <= end and t + late + 0.01 >= start:
                late_sum += late
                rq_sum += rq
        return late_sum, rq_sum

    def summary(self) -> dict[str, Any]:
        return {
            "worst_wakeup_late_s": round(self.worst, 3),
            "stalls_over_50ms": len(self.stalls),
            "stalls_over_250ms": sum(1 for _, late, _ in self.stalls if late > 0.25),
            "worst": [
                {"at_s": round(t - self.soak.t0, 1), "late_s": round(late, 3), "waiting_for_cpu_s": round(rq, 3)}
                for t, late, rq in sorted(self.stalls, key=lambda x: -x[1])[:5]
            ],
        }


# ----------------------------------------------------------------------------- faults


class _Faults:
    def __init__(self, soak: _Soak) -> None:
        self.soak = soak
        self.rng = random.Random(soak.cfg.seed)
        self.log: list[dict[str, Any]] = []
        self.crash: str | None = None
        self.thread = threading.Thread(target=self._main, name="soak-faults", daemon=True)

    def _main(self) -> None:
        try:
            self.run()
        except BaseException:  # noqa: BLE001
            self.crash = traceback.format_exc()
        finally:
            self.heal()

    def run(self) -> None:
        soak = self.soak
        cfg = soak.cfg
        kinds = [k for k in FAULT_KINDS if cfg.weights.get(k, 0) > 0]
        weights = [cfg.weights[k] for k in kinds]
        end = soak.t0 + cfg.seconds - cfg.quiet_tail
        if soak.stop_faults.wait(cfg.warmup):
            return
        while True:
            gap = self.rng.uniform(*cfg.fault_gap)
            kind = self.rng.choices(kinds, weights)[0]
            node = self.rng.randrange(len(soak.cluster))
            hold = self.rng.uniform(*cfg.hold)
            pick = self.rng.random()
            if time.monotonic() + hold >= end or soak.stop_faults.is_set():
                return
            entry: dict[str, Any] = {"kind": kind, "start": time.monotonic() - soak.t0}
            try:
                getattr(self, kind)(entry, node, hold, pick)
                entry["ok"] = True
            except Exception as exc:  # noqa: BLE001 - a fault that could not be applied is reported
                entry["ok"] = False
                entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
            entry["end"] = time.monotonic() - soak.t0
            self.log.append(entry)
            if soak.stop_faults.wait(gap):
                return

    def kill(self, entry: dict[str, Any], node: int, hold: float, pick: float) -> None:
        cluster = self.soak.cluster
        entry["node"] = f"n{node + 1}"
        cluster.kill(node)
        time.sleep(hold)
        cluster.restart(node, timeout=60.0)

    def pause(self, entry: dict[str, Any], node: int, hold: float, pick: float) -> None:
        cluster = self.soak.cluster
        entry["node"] = f"n{node + 1}"
        cluster.pause(node)
        try:
            time.sleep(hold)
        finally:
            cluster.resume(node)

    def cut(self, entry: dict[str, Any], node: int, hold: float, pick: float) -> None:
        for proxy in self.soak.proxies:
            proxy.reset()

    def _stepdown(self, subject: str) -> None:
        reply = self.soak.ctl.request(subject, b"", timeout=5.0)
        body = json.loads(reply.data or b"{}")
        if not body.get("success"):
            raise RuntimeError(f"step-down refused: {body.get('error', body)}")

    def stream_stepdown(self, entry: dict[str, Any], node: int, hold: float, pick: float) -> None:
        self._stepdown(f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}")

    def consumer_stepdown(self, entry: dict[str, Any], node: int, hold: float, pick: float) -> None:
        name = "C_CONSUME" if pick < 0.5 else "C_FETCH"
        entry["consumer"] = name
        self._stepdown(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{STREAM}.{name}")

    def heal(self) -> None:
        """Every node running and resumed (whatever the last fault left)."""
        cluster = self.soak.cluster
        for i, server in enumerate(cluster.servers):
            if server.paused:
                cluster.resume(i)
            if not server.running:
                cluster.restart(i, timeout=60.0)

    def by_kind(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for e in self.log:
            k = out.setdefault(e["kind"], {"injected": 0, "refused": 0})
            k["injected" if e["ok"] else "refused"] += 1
        return out


# ----------------------------------------------------------------------------- the run


class _Soak:
    def __init__(self, cluster: NatsCluster, cfg: SoakConfig) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.t0 = time.monotonic()
        self.times = CallTimes(cfg.margin)
        self.stop_faults = threading.Event()
        self.stop_publishing = threading.Event()
        self.stop_consuming = threading.Event()
        self.proxies = [FaultProxy(s.url, capture=False, seed=cfg.seed + i) for i, s in enumerate(cluster.servers)]
        self.proxy_urls = [p.url for p in self.proxies]
        self.write_id = f"w{cfg.seed}"
        self._rotation = 0
        self.ctl = connect(cluster.urls, name="soak-control", **CLIENT_OPTIONS)

    def next_rotation(self) -> int:
        self._rotation += 1
        return self._rotation % len(self.cluster)

    def close(self) -> None:
        try:
            self.ctl.close()
        finally:
            for p in self.proxies:
                p.close()


def _setup_stream(ctl: Client, timeout: float) -> None:
    js = ctl.jetstream(timeout=timeout)
    deadline = time.monotonic() + 30.0
    while True:  # the meta leader may still be settling
        try:
            js.create_stream(
                name=STREAM, subjects=[f"{SUBJECT}.>"], storage=StorageType.FILE, num_replicas=3,
                allow_direct=True, duplicate_window=300.0,
            )
            for durable in ("C_CONSUME", "C_FETCH"):
                js.create_or_update_consumer(STREAM, durable_name=durable, ack_wait=10.0, num_replicas=3, max_ack_pending=5000)
            return
        except NatsError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def _stream_last_seq(ctl: Client, timeout: float) -> tuple[int, int]:
    """(messages, last_seq) of the stream, asked until the cluster answers."""
    js = ctl.jetstream(timeout=timeout)
    deadline = time.monotonic() + 60.0
    while True:
        try:
            state = js.stream_info(STREAM).state
            return state.messages, state.last_seq
        except NatsError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def _read_back(
    cluster: NatsCluster, expected: int, last_seq: int, timeout: float
) -> tuple[list[tuple[int, int]], dict[int, bytes]]:
    """The whole stream by batched direct get, from a fresh client, as (seq, ledger code), and
    the payloads that are not ledger ids; read again until the count matches the stream's
    state (a replica answering a direct get may lag behind)."""
    with connect(cluster.urls, name="soak-readback", **CLIENT_OPTIONS) as nc:
        stream = nc.jetstream(timeout=timeout).stream(STREAM)
        deadline = time.monotonic() + 60.0
        while True:
            out: list[tuple[int, int]] = []
            raw: dict[int, bytes] = {}
            seq = 1
            try:
                while seq <= last_seq:
                    got = 0
                    for m in stream.direct_get_batch(seq=seq, batch=1000, timeout=timeout):
                        code = parse_payload(m.data)
                        if code < 0 and len(raw) < 100:
                            raw[m.seq] = m.data[:64]
                        out.append((m.seq, code))
                        got += 1
                    if not got:
                        break
                    seq = out[-1][0] + 1
            except NatsError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                continue
            if len(out) == expected or time.monotonic() > deadline:
                return out, raw
            time.sleep(0.5)


def _bookkeeping_kib(workers: list[_Worker]) -> int:
    """What the soak itself holds for the check at the end of the load (the ledger, the
    consumers' logs, the success times), roughly: it is part of the process's memory."""
    total = 0
    for w in workers:
        total += w.ok_times.itemsize * len(w.ok_times)
        led = getattr(w, "ledger", None)
        if led is not None:
            total += led.states.itemsize * len(led.states) + 100 * len(led.partitions)
        log = getattr(w, "log", None)
        if log is not None:
            total += 16 * len(log.seqs) + log.seen_bytes
    return total // 1024


def _consumer_state(ctl: Client, name: str, timeout: float) -> dict[str, Any]:
    """What the server says of a durable (for the report: a consumer that fell behind)."""
    try:
        info = ctl.jetstream(timeout=timeout).consumer_info(STREAM, name)
    except NatsError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    cluster = info.cluster
    return {
        "delivered_stream_seq": info.delivered.stream_seq,
        "ack_floor_stream_seq": info.ack_floor.stream_seq,
        "num_pending": info.num_pending,
        "num_ack_pending": info.num_ack_pending,
        "num_redelivered": info.num_redelivered,
        "num_waiting": info.num_waiting,
        "leader": cluster.leader if cluster else None,
        "replicas": [(r.name, r.current, r.offline, r.lag) for r in (cluster.replicas or [])] if cluster else None,
    }


def _recovery(faults: list[dict[str, Any]], workers: list[_Worker], t0: float, until: float) -> dict[str, Any]:
    """Per fault kind, the worst time from a fault's end to the next success of every worker."""
    per_kind: dict[str, dict[str, Any]] = {}
    worst: dict[str, Any] = {"seconds": 0.0}
    for f in faults:
        if not f.get("ok"):
            continue
        end = t0 + f["end"]
        slowest = 0.0
        who = ""
        for w in workers:
            i = bisect_left(w.ok_times, end)
            after = w.ok_times[i] if i < len(w.ok_times) else until
            if after - end > slowest:
                slowest, who = after - end, w.name
        k = per_kind.setdefault(f["kind"], {"worst_s": 0.0, "worker": "", "at_s": 0.0})
        if slowest > k["worst_s"]:
            k.update(worst_s=round(slowest, 3), worker=who, at_s=round(f["end"], 1))
        if slowest > worst["seconds"]:
            worst = {"seconds": round(slowest, 3), "kind": f["kind"], "worker": who, "fault_end_s": round(f["end"], 1)}
    return {"worst": worst, "by_kind": per_kind}


def _max_gaps(workers: list[_Worker], start: float, end: float, t0: float) -> dict[str, dict[str, float]]:
    """Per worker, the longest time without a success (and when it began, seconds into the run)."""
    out: dict[str, dict[str, float]] = {}
    for w in workers:
        points = [start, *(t for t in w.ok_times if start <= t <= end), end]
        gap, at = max((b - a, a) for a, b in zip(points, points[1:]))
        out[w.name] = {"gap_s": round(gap, 3), "from_s": round(at - t0, 1)}
    return out


def run_soak(cluster: NatsCluster, cfg: SoakConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the soak against a started cluster; returns the report (``report["violations"]`` is
    empty when every check passed)."""
    say = progress or (lambda _m: None)
    mem_before = memory_kib()
    soak = _Soak(cluster, cfg)
    workers: list[_Worker] = []
    try:
        _setup_stream(soak.ctl, cfg.js_timeout)
        pubs: list[Any] = [_SyncPublisher(soak), _AsyncPublisher(soak), _BulkPublisher(soak)]
        cons: list[Any] = [_Consume(soak), _Fetch(soak), _Ordered(soak)]
        workers.extend(pubs + cons)
        faults = _Faults(soak)
        probe = _Probe(soak)
        soak.t0 = time.monotonic()
        probe.thread.start()
        for w in workers:
            w.thread.start()
        faults.thread.start()
        say(f"load with faults for {cfg.seconds:g} s (seed {cfg.seed})")
        t_end = soak.t0 + cfg.seconds
        while time.monotonic() < t_end:
            time.sleep(min(10.0, max(0.0, t_end - time.monotonic())))
            if time.monotonic() < t_end:
                acked = sum(p.ledger.attempted for p in pubs)
                say(f"  t={time.monotonic() - soak.t0:5.0f}s published={acked} faults={len(faults.log)}")
        soak.stop_faults.set()
        faults.thread.join(120.0)
        t_load_end = time.monotonic()
        soak.stop_publishing.set()
        for w in pubs:
            w.thread.join(120.0)
        mem_load = memory_kib()
        cluster.wait_healthy(60.0)
        say("load over; waiting for the consumers to see everything")
        messages, last_seq = _stream_last_seq(soak.ctl, cfg.js_timeout)
        drain_start = time.monotonic()
        all_seqs = range(1, last_seq + 1)
        drain_deadline = drain_start + cfg.drain_timeout
        while time.monotonic() < drain_deadline:
            if all(c.log.covers(all_seqs) for c in cons if not c.log.ordered) and (
                cons[2].log.distinct >= last_seq
            ):
                break
            time.sleep(0.2)
        drained_in = time.monotonic() - drain_start
        consumer_infos = {name: _consumer_state(soak.ctl, name, cfg.js_timeout) for name in ("C_CONSUME", "C_FETCH")}
        soak.stop_consuming.set()
        for w in cons:
            w.thread.join(60.0)
        stored, raw = _read_back(cluster, messages, last_seq, cfg.js_timeout)
        for over in soak.times.over:
            late, rq = probe.during(soak.t0 + over["at"], soak.t0 + over["at"] + over["elapsed"])
            over["process_stalled_s"] = round(late, 3)
            over["of_it_waiting_for_cpu_s"] = round(rq, 3)
        ledger = Ledger([p.ledger for p in pubs], [c.log for c in cons], soak.times)
        violations = check(ledger, stored, raw)
        for w in [*workers]:
            if w.thread.is_alive():
                violations.setdefault("worker_hung", {"count": 0, "examples": []})
                violations["worker_hung"]["count"] += 1
                violations["worker_hung"]["examples"].append(w.name)
            if w.crash:
                violations.setdefault("worker_crashed", {"count": 0, "examples": []})
                violations["worker_crashed"]["count"] += 1
                violations["worker_crashed"]["examples"].append({"worker": w.name, "traceback": w.crash[-2000:]})
        if faults.crash:
            violations["fault_injector_crashed"] = {"count": 1, "examples": [faults.crash[-2000:]]}
        if soak.proxies and any(p.errors for p in soak.proxies):
            violations["proxy_errors"] = {"count": 1, "examples": [repr(p.errors[:3]) for p in soak.proxies]}
        mem_end = memory_kib()
        report: dict[str, Any] = {
            "config": {k: v for k, v in asdict(cfg).items()},
            "duration_s": round(t_load_end - soak.t0, 1),
            "faults": faults.by_kind(),
            "fault_log": faults.log,
            "publishers": {w.name: w.ledger.summary() for w in pubs},
            "bulk": {"partition_attempts": pubs[2].attempts, "partitions_retried": pubs[2].retried},
            "async_unsettled_futures": pubs[1].unsettled,
            "stream": {"messages": messages, "last_seq": last_seq, "read_back": len(stored)},
            "consumers": {
                c.log.name: {
                    "deliveries": len(c.log.seqs),
                    "distinct": c.log.distinct,
                    "errors": dict(sorted(c.log.errors.items())),
                    **({"restarts_after_error": c.restarts} if isinstance(c, _Ordered) else {}),
                    **({"notifications": dict(sorted(c.notes.items())), "notification_log": c.note_log}
                       if isinstance(c, _Consume) else {}),
                }
                for c in cons
            },
            "drained_in_s": round(drained_in, 1),
            "consumer_infos_after_drain": consumer_infos,
            "fetch_error_log": cons[1].error_log,
            "fetch_empty_streak": {"worst": cons[1].worst_empty_streak, "at_end": cons[1].empty_streak},
            "last_success_s": {w.name: round(w.ok_times[-1] - soak.t0, 1) if w.ok_times else None for w in workers},
            "connected_to": {w.name: (w.client.connected_url if w.client else None) for w in workers},
            "recovery": _recovery(faults.log, workers, soak.t0, t_load_end),
            "max_gap_between_successes_s": _max_gaps(workers, soak.t0 + cfg.warmup, t_load_end, soak.t0),
            "reconnects": {w.name: (w.client.stats["reconnects"] if w.client else None) for w in workers},
            "calls": soak.times.summary(),
            "process_stalls": probe.summary(),
            "over_timeout_while_process_stalled": [o for o in soak.times.over if soak.times.excused(o)][:20],
            "memory_kib": {
                "before": mem_before,
                "after_load": mem_load,
                "end": mem_end,
                "soak_bookkeeping_at_load_end_estimate": _bookkeeping_kib(workers),
            },
            "violations": violations,
        }
        return report
    finally:
        soak.stop_faults.set()
        soak.stop_publishing.set()
        soak.stop_consuming.set()
        for w in workers:
            w.thread.join(30.0)
            if w.client is not None:
                try:
                    w.client.close()
                except NatsError:
                    pass
        soak.close()
