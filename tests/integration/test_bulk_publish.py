"""The bulk publisher under the Spark writers (jssync.bulk + jscore.publish.FrameWindow) against
a real nats-server: a lost connection, a server killed and restarted, acks that never come and a
client closed under the writer. Whatever happens, the stream ends with every row exactly once,
or the write raises a typed error; it never returns with a publish unconfirmed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jssync
from jscore.errors import ConnectionClosedError, MaxPayloadError, PubAckTimeoutError
from jssync.bulk import BulkPublisher
from jssync.server import NatsServer
from jssync.spark import NatsConfig, WriteOptions, _cache, write_partition

N = 20_000


@pytest.fixture(autouse=True)
def _no_cached_clients() -> Iterator[None]:
    yield
    _cache.close_all()


def _stream(url: str, name: str, subject: str) -> Any:
    c = jssync.connect(url, name="bulk-admin")
    js = c.jetstream(timeout=10)
    js.create_stream(name=name, subjects=[subject], duplicate_window=120.0)
    return c, js


def _check_exactly_once(js: Any, name: str, n: int, prefix: str) -> None:
    """Every row stored once: n messages, distinct msg ids and the payloads 0..n-1."""
    info = js.stream_info(name)
    assert info.state.messages == n
    ids = set()
    payloads = set()
    oc = js.ordered_consumer(name)
    for msg in oc.fetch(n, expires=30):
        ids.add(msg.headers["Nats-Msg-Id"])
        payloads.add(int(msg.data))
    assert len(ids) == n and all(i.startswith(prefix) for i in ids)
    assert payloads == set(range(n))


def _rows(n: int, at: int, fault: Callable[[], None]) -> Iterator[bytes]:
    for i in range(n):
        if i == at:
            fault()
        yield b"%d" % i


def test_connection_cut_mid_partition_loses_and_duplicates_nothing(
    nats_server: NatsServer, fault_proxy: Callable[..., Any]
) -> None:
    admin, js = _stream(nats_server.url, "BCUT", "bcut.x")
    proxy = fault_proxy(nats_server)
    cfg = NatsConfig(servers=(proxy.url,))
    try:
        r = write_partition(_rows(N, N // 3, proxy.cut), cfg, WriteOptions(subject="bcut.x"), write_id="cut", partition_id=0)
        assert r.written == N and r.resent > 0  # what was in flight went out again
        assert _cache.get_client(cfg).stats["reconnects"] >= 1
        _check_exactly_once(js, "BCUT", N, "cut-0-")
    finally:
        admin.close()


def test_server_killed_and_restarted_mid_partition(nats_server_factory: Callable[..., NatsServer]) -> None:
    server = nats_server_factory(jetstream_config="sync_interval: always")
    admin, js = _stream(server.url, "BKILL", "bkill.x")
    admin.close()
    cfg = NatsConfig(servers=(server.url,))

    def kill_and_restart() -> None:
        server.kill()
        threading.Thread(target=lambda: (time.sleep(0.3), server.restart()), daemon=True).start()

    r = write_partition(_rows(N, N // 2, kill_and_restart), cfg, WriteOptions(subject="bkill.x"), write_id="kill", partition_id=3)
    assert r.written == N
    admin = jssync.connect(server.url, name="bulk-admin")
    js = admin.jetstream(timeout=10)
    try:
        _check_exactly_once(js, "BKILL", N, "kill-3-")
    finally:
        admin.close()


def test_acks_that_never_come_fail_after_the_resends(nats_server: NatsServer, fault_proxy: Callable[..., Any]) -> None:
    admin, js = _stream(nats_server.url, "BDROP", "bdrop.x")
    proxy = fault_proxy(nats_server)
    proxy.drop_frames("down", lambda f: f.startswith(b"MSG _INBOX.") and b'"seq"' in f)
    cfg = NatsConfig(servers=(proxy.url,))
    t0 = time.monotonic()
    try:
        with pytest.raises(PubAckTimeoutError) as info:
            write_partition([b"a", b"b", b"c"], cfg, WriteOptions(subject="bdrop.x", ack_timeout=0.3, retries=2), write_id="d", partition_id=0)
        assert time.monotonic() - t0 < 10
        notes = " ".join(getattr(info.value, "__notes__", []))
        assert "after 2 re-sends" in notes and "one of rows 0-2 (msg ids 'd-0-0' to 'd-0-2')" in notes
        assert _cache.cached_configs() == []  # the failed task's client is dropped
        assert js.stream_info("BDROP").state.messages == 3  # stored once, whatever was re-sent
    finally:
        admin.close()


def test_client_closed_under_the_writer_raises(nats_server: NatsServer) -> None:
    admin, js = _stream(nats_server.url, "BCLOSE", "bclose.x")
    cfg = NatsConfig(servers=(nats_server.url,))
    try:
        with pytest.raises(ConnectionClosedError):
            write_partition(_rows(5000, 2000, lambda: _cache.get_client(cfg).close()), cfg, WriteOptions(subject="bclose.x"), write_id="c", partition_id=0)
        assert _cache.cached_configs() == []
    finally:
        admin.close()


def test_row_over_max_payload_raises_before_it_is_sent(nats_server: NatsServer) -> None:
    admin, js = _stream(nats_server.url, "BBIG", "bbig.x")
    cfg = NatsConfig(servers=(nats_server.url,))
    try:
        big = b"x" * (1024 * 1024 + 1)
        with pytest.raises(MaxPayloadError, match="row 1"):
            write_partition([b"ok", big], cfg, WriteOptions(subject="bbig.x"), write_id="b", partition_id=0)
    finally:
        admin.close()


def test_bulk_publisher_drops_its_inbox_and_ignores_late_acks(nats_server: NatsServer) -> None:
    c = jssync.connect(nats_server.url)
    try:
        js = c.jetstream()
        js.create_stream(name="BRAW", subjects=["braw.x"])
        bp = BulkPublisher(c, max_pending=2, ack_timeout=5.0)
        frames = []
        for i in range(6):
            hdr = b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % i
            data = b"%d" % i
            frames.append(b"HPUB braw.x %s%d %d %d\r\n%s%s\r\n" % (bp.reply_prefix, i, len(hdr), len(hdr) + len(data), hdr, data))
        for i in range(0, 6, 2):
            bp.send(i, frames[i : i + 2])  # blocks while the window (2) is full
        window = bp.finish()
        assert (window.written, window.duplicates, window.in_flight) == (6, 0, 0)
        subs = len(c._session._routes)
        bp.close()
        bp.close()
        assert len(c._session._routes) == subs - 1
        assert js.stream_info("BRAW").state.messages == 6
    finally:
        c.close()


def test_bytes_in_flight_stay_under_max_pending_bytes(nats_server: NatsServer) -> None:
    """Rows of 20 KiB, a count bound (4000) that alone would allow 80 MiB in flight, and a byte
    bound of 256 KiB: the writer never holds more than the bound plus its last batch, and every
    row is stored once."""
    c = jssync.connect(nats_server.url)
    try:
        js = c.jetstream()
        js.create_stream(name="BBYTES", subjects=["bbytes.x"])
        limit = 256 * 1024
        bp = BulkPublisher(c, max_pending=4000, max_pending_bytes=limit, ack_timeout=10.0)
        payload = b"p" * (20 * 1024)
        batch = 4
        peak = 0
        for first in range(0, 400, batch):
            frames = []
            for i in range(first, first + batch):
                hdr = b"NATS/1.0\r\nNats-Msg-Id: b%d\r\n\r\n" % i
                frames.append(
                    b"HPUB bbytes.x %s%d %d %d\r\n%s%s\r\n" % (bp.reply_prefix, i, len(hdr), len(hdr) + len(payload), hdr, payload)
                )
            bp.send(first, frames)
            peak = max(peak, bp.window.bytes_in_flight)
            assert bp.window.in_flight <= limit // len(payload) + batch
        assert peak <= limit + batch * len(frames[0])
        window = bp.finish()
        assert (window.written, window.in_flight, window.bytes_in_flight) == (400, 0, 0)
        bp.close()
        assert js.stream_info("BBYTES").state.messages == 400
    finally:
        c.close()


def test_cluster_stream_leader_stepdowns_mid_partition(nats_cluster: Any) -> None:
    """An R3 stream on a 3-node cluster, its leader stepped down 4 times while a partition is
    written: 503s, timeouts and "in process" answers are re-sent as the same frames; every row is
    stored exactly once."""
    from tests.integration._jspub import api, create_stream, unique

    admin = jssync.connect(nats_cluster.urls, name="bulk-admin", reconnect_wait=0.1, max_reconnect_attempts=-1)
    name = unique("BR3")
    subject = f"{name.lower()}.x"
    create_stream(admin, name, subjects=[subject], num_replicas=3, duplicate_window=120 * 1_000_000_000)
    stepdowns: list[bool] = []

    def stepdown() -> None:
        reply = api(admin, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", timeout=5)
        stepdowns.append(bool(reply.get("success")))

    def rows() -> Iterator[bytes]:
        for i in range(N):
            if i and i % (N // 5) == 0:
                threading.Thread(target=stepdown, daemon=True).start()
            yield b"%d" % i

    cfg = NatsConfig(servers=tuple(nats_cluster.urls))
    try:
        # A msg id can stay "in process" on a leader that lost its proposal in a stepdown until
        # the 120 s duplicate window purges it: transient answers are re-sent for up to
        # ack_timeout * (retries + 1) = 155 s.
        r = write_partition(rows(), cfg, WriteOptions(subject=subject, ack_timeout=5.0, retries=30), write_id="r3", partition_id=0)
        assert r.written == N
        assert sum(stepdowns) >= 3, stepdowns
        _check_exactly_once(admin.jetstream(timeout=10), name, N, "r3-0-")
    finally:
        admin.close()


def test_a_publish_machine_that_breaks_settles_what_is_in_flight(nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish machine that breaks on a PubAck (a bug in the core) does not leave futures,
    sync publishes or a bulk writer waiting: what was in flight is settled as ambiguous (the
    cause chained), and the next publish starts a new machine."""
    from jscore import pubmachines

    c = jssync.connect(nats_server.url)
    try:
        js = c.jetstream(timeout=5.0)
        js.create_stream(name="BROKE", subjects=["broke.x"])

        def broken(self: Any, *args: Any) -> None:
            raise RuntimeError("broken on purpose")

        with monkeypatch.context() as m:
            m.setattr(pubmachines.AsyncPublishMachine, "receive_acks", broken)
            m.setattr(pubmachines.AsyncPublishMachine, "receive_msg", broken)
            fut = js.publish_async("broke.x", b"1")
            with pytest.raises(PubAckTimeoutError) as caught:
                fut.result(timeout=10.0)
            assert isinstance(caught.value.__cause__, RuntimeError)
        assert js.publish_async("broke.x", b"2").result(timeout=10.0).seq == 2  # a new machine
        assert js.publish("broke.x", b"3").seq == 3

        with monkeypatch.context() as m:
            m.setattr(pubmachines.BulkPublishMachine, "receive_acks", broken)
            m.setattr(pubmachines.BulkPublishMachine, "receive_msg", broken)
            bp = BulkPublisher(c, max_pending=10, ack_timeout=5.0)
            hdr = b"NATS/1.0\r\nNats-Msg-Id: b1\r\n\r\n"
            bp.send(0, [b"HPUB broke.x %s0 %d %d\r\n%sx\r\n" % (bp.reply_prefix, len(hdr), len(hdr) + 1, hdr)])
            started = time.monotonic()
            with pytest.raises(PubAckTimeoutError, match="^the publisher stopped") as caught:
                bp.finish()
            assert time.monotonic() - started < 5.0  # at once, not after the guard time
            assert isinstance(caught.value.__cause__, RuntimeError)
            bp.close()
    finally:
        c.close()
