"""Leading: a caller waiting for an answer reads the socket itself while the I/O thread stays
parked (see docs/design.md, "a caller waiting for an answer reads the socket itself").

Against the scripted fake server: which thread fed the bytes, what the leader hands over to the
I/O thread (a server PING's PONG, a fatal -ERR, another caller's reply, a close), and that a
lead never outlives what it waits for.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from jscore.errors import ConnectionClosedError, FetchTimeoutError, NatsError, TimeoutError
from jscore.spin import PROBE_EVERY, SHARED_HOLD, SPIN_LIMIT
import jssync.pull as jssync_pull
from jssync import Client
from jssync.events import Closed, Disconnected, Reconnected, ServerError
from tests.integration import EventLog, clients, wait_until
from tests.support.fakeserver import FakeConn, FakeServer

__all__ = ["clients"]

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not hasattr(select, "epoll"), reason="leading needs epoll (Linux)"),
]


STREAM_INFO = (
    b'{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"S","subjects":["s.>"],'
    b'"allow_direct":true},"state":{"messages":0,"bytes":0,"first_seq":0,"last_seq":0,"consumer_count":0},'
    b'"created":"2026-11-28T00:00:00Z"}'
)


def _connected(fake: FakeServer, clients: Callable[..., Client], **options: Any) -> tuple[Client, FakeConn]:
    nc = clients(fake.url, **options)
    conn = fake.accept()
    conn.handshake()
    nc.flush(timeout=2)
    return nc, conn


def _feeders(nc: Client) -> list[str]:
    """Record the name of the thread that feeds each read to the core."""
    names: list[str] = []
    session = nc._session
    real = session.receive_data

    def recording(data: bytes, now: float) -> None:
        names.append(threading.current_thread().name)
        real(data, now)

    session.receive_data = recording  # type: ignore[method-assign]
    return names


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # noqa: BLE001
            box.append(exc)

    t = threading.Thread(target=run, name="caller")
    t.start()
    return t, box


def _reply_to(conn: FakeConn, subject: bytes) -> tuple[str, int]:
    """The reply subject of the next PUB on ``subject`` and the sid of the request inbox."""
    frames = [f for f in conn.received if f.startswith(b"SUB _INBOX.")]
    pub = conn.expect(b"PUB " + subject + b" ")
    if not frames:
        frames = [f for f in conn.received if f.startswith(b"SUB _INBOX.")]
    return pub.split()[2].decode(), int(frames[-1].split()[-1])


def test_a_request_reads_its_own_reply(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    nc, conn = _connected(fake_server, clients)
    names = _feeders(nc)
    t, box = _in_thread(lambda: nc.request("svc", b"q", timeout=3))
    reply, sid = _reply_to(conn, b"svc")
    time.sleep(0.05)  # the caller is parked in its own poll by now
    conn.send_msg(reply, sid, b"answer")
    t.join(3)
    assert box and getattr(box[0], "data", None) == b"answer"
    assert names == ["caller"], names  # the I/O thread never woke for it


def test_the_leader_answers_a_server_ping(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    nc, conn = _connected(fake_server, clients)
    names = _feeders(nc)
    t, box = _in_thread(lambda: nc.request("svc", b"q", timeout=3))
    reply, sid = _reply_to(conn, b"svc")
    time.sleep(0.05)
    conn.send(b"PING\r\n")
    assert conn.expect(b"PONG", timeout=2) == b"PONG\r\n"  # written by the leader
    conn.send_msg(reply, sid, b"answer")
    t.join(3)
    assert box and getattr(box[0], "data", None) == b"answer"
    assert set(names) == {"caller"}, names


def test_the_leader_routes_another_callers_reply(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    nc, conn = _connected(fake_server, clients)
    names = _feeders(nc)
    t1, box1 = _in_thread(lambda: nc.request("one", b"1", timeout=3))
    reply1, sid = _reply_to(conn, b"one")
    time.sleep(0.05)  # the first caller leads
    t2, box2 = _in_thread(lambda: nc.request("two", b"2", timeout=3))
    reply2, _ = _reply_to(conn, b"two")
    time.sleep(0.05)  # the second waits on its queue
    conn.send_msg(reply2, sid, b"second")  # read by the leader, for the other caller
    t2.join(3)
    assert box2 and getattr(box2[0], "data", None) == b"second"
    assert t1.is_alive()
    conn.send_msg(reply1, sid, b"first")
    t1.join(3)
    assert box1 and getattr(box1[0], "data", None) == b"first"
    assert "jssync-io" not in names, names


def test_a_fatal_error_read_by_the_leader_is_handed_to_the_io_thread(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    nc, conn = _connected(fake_server, clients, on_event=events)
    names = _feeders(nc)
    t, box = _in_thread(lambda: nc.request("svc", b"q", timeout=3))
    _reply_to(conn, b"svc")
    time.sleep(0.05)
    t0 = time.monotonic()
    conn.send(b"-ERR 'Stale Connection'\r\n")
    # The I/O thread closes this transport and reconnects (the notices in order, once each).
    again = fake_server.accept(timeout=5)
    again.handshake()
    events.wait_for(Reconnected, timeout=5)
    t.join(5)
    assert names[0] == "caller"
    assert not t.is_alive()
    assert box and isinstance(box[0], (TimeoutError, NatsError)), box
    assert time.monotonic() - t0 < 4.0
    kinds = [type(e) for e in events.events if type(e) in (ServerError, Disconnected, Reconnected)]
    assert kinds.index(Disconnected) < kinds.index(Reconnected)
    assert kinds.count(Disconnected) == 1 and kinds.count(Reconnected) == 1
    assert nc.is_connected


def _leading_request(
    fake: FakeServer, clients: Callable[..., Client], timeout: float, **options: Any
) -> tuple[Client, FakeConn, threading.Thread, list[Any]]:
    """A client with a request in flight whose caller is parked in its own poll by now."""
    nc, conn = _connected(fake, clients, **options)
    t, box = _in_thread(lambda: nc.request("svc", b"q", timeout=timeout))
    _reply_to(conn, b"svc")
    time.sleep(0.05)
    return nc, conn, t, box


def test_an_eof_under_a_leader_goes_to_the_io_thread(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    events = EventLog()
    _nc, conn, t, box = _leading_request(fake_server, clients, 2, on_event=events)
    conn.close()
    events.wait_for(Disconnected, timeout=3)  # found by the I/O thread, which reconnects
    fake_server.accept(timeout=5).handshake()
    events.wait_for(Reconnected, timeout=5)
    t.join(4)
    assert not t.is_alive(), "the request hung"
    assert box and isinstance(box[0], (TimeoutError, NatsError)), box


def test_close_wakes_a_leader_at_once(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    events = EventLog()
    nc, _conn, t, box = _leading_request(fake_server, clients, 30, on_event=events)
    t0 = time.monotonic()
    nc.close(timeout=2)
    t.join(3)
    assert not t.is_alive(), "the request hung"
    assert time.monotonic() - t0 < 0.2  # not the leader's periodic look (0.25 s)
    assert box and isinstance(box[0], ConnectionClosedError), box
    assert len(events.of(Closed)) == 1


def _stream_s(fake: FakeServer, clients: Callable[..., Client], **options: Any) -> tuple[Client, FakeConn, Any]:
    """A client and its handle on stream S (the fake server answers its info request)."""
    nc, conn = _connected(fake, clients, **options)
    t, box = _in_thread(lambda: nc.jetstream().stream("S"))
    reply, sid = _reply_to(conn, b"$JS.API.STREAM.INFO.S")
    conn.send_msg(reply, sid, STREAM_INFO)
    t.join(3)
    return nc, conn, box[0]


def test_a_batch_timed_out_by_the_io_thread_ends_the_lead(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """A batched direct get that gets no answer: the leading caller wakes the I/O thread when
    the machine's deadline comes due, and the I/O thread, having fired it, pokes the leader:
    the lead ends at that moment."""
    nc, conn, stream = _stream_s(fake_server, clients, ping_interval=30)
    time.sleep(0.1)  # (the I/O thread parked, to its next PING 30 s away, before the call)
    # Without the wake-up and the poke, the machine's deadline would fire at the PING.
    assert 0.29 <= _silent_batch(stream, conn, 0.3) < 0.45


def _silent_batch(stream: Any, conn: FakeConn, timeout: float) -> float:
    """How long a batched direct get the fake server never answers takes to raise its
    machine's TimeoutError from the first ``next()``, counted from the call."""
    t0 = time.monotonic()
    it = stream.direct_get_batch(batch=10, seq=1, timeout=timeout)
    conn.expect(b"PUB $JS.API.DIRECT.GET.S ")
    with pytest.raises(TimeoutError):
        next(it)
    assert it.reason == "timeout"
    return time.monotonic() - t0


def test_a_batch_that_cannot_lead_is_timed_out_by_the_io_thread(
    fake_server: FakeServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call's deadline is set without waking the I/O thread (a leader watches it); a
    caller that cannot lead (here: every take refused, as for TLS) arms the I/O thread before
    it waits, so the machine still times the call out at its deadline, not at the guard's."""
    nc, conn, stream = _stream_s(fake_server, clients, ping_interval=30)
    monkeypatch.setattr(Client, "_take_read_locked", lambda self, round_trip=True: None)
    time.sleep(0.1)  # (the I/O thread parked, to its next PING 30 s away, before the call)
    assert 0.29 <= _silent_batch(stream, conn, 0.3) < 0.45


def test_a_deadline_set_without_a_wake_up_does_not_hide_a_later_one(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """An iterator not read yet (its deadline set without waking the I/O thread), then a
    machine attached the usual way with a later deadline: the I/O thread is woken, because
    what counts is the deadline it sleeps to, not the session's previous one. Both calls time
    out when they should."""
    from jscore import directget as DG
    from jssync.client import shell_of

    nc, conn, stream = _stream_s(fake_server, clients, ping_interval=30)
    time.sleep(0.1)  # (the I/O thread parked, to its next PING 30 s away)
    unread = stream.direct_get_batch(batch=10, seq=1, timeout=0.3)
    conn.expect(b"PUB $JS.API.DIRECT.GET.S ")
    ended = threading.Event()
    shell = shell_of(nc)
    machine = DG.DirectGetBatch("$JS.API.DIRECT.GET.S", DG.resolve_batch(batch=1), timeout=0.5, now=time.monotonic())
    t0 = time.monotonic()
    with shell.lock:
        shell.attach_locked(machine, lambda e: ended.set() if isinstance(e, DG.DirectGetFinished) else None)
    assert ended.wait(2.0), "the later deadline was never fired"
    assert machine.reason == "timeout" and time.monotonic() - t0 < 0.75
    assert unread.done and unread.reason == "timeout"


def test_a_batch_deadline_passed_before_the_first_next_is_fired(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """An iterator read only after its deadline: the lead finds the timer due and wakes the
    I/O thread for it at once."""
    nc, conn, stream = _stream_s(fake_server, clients, ping_interval=30)
    time.sleep(0.1)  # (the I/O thread parked, to its next PING 30 s away, before the call)
    it = stream.direct_get_batch(batch=10, seq=1, timeout=0.2)
    conn.expect(b"PUB $JS.API.DIRECT.GET.S ")
    time.sleep(0.4)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        next(it)
    assert it.reason == "timeout"
    assert time.monotonic() - t0 < 0.15  # not the leader's periodic look (0.25 s)


def test_a_publish_retry_timer_armed_by_the_leader_fires(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """The leader reads a 503 whose re-send is a timer: it wakes the I/O thread to arm it."""
    nc, conn = _connected(fake_server, clients)
    js = nc.jetstream()
    t, box = _in_thread(lambda: js.publish("orders.x", b"o", timeout=3))
    first = conn.expect(b"PUB orders.x ")
    reply = first.split()[2].decode()
    sid = int([f for f in conn.received if f.startswith(b"SUB _INBOX.")][-1].split()[-1])
    time.sleep(0.05)
    conn.send_msg(reply, sid, b"", headers=b"NATS/1.0 503\r\n\r\n")
    again = conn.expect(b"PUB orders.x ", timeout=2)  # the backoff's re-send (0.25 s)
    reply = again.split()[2].decode()
    conn.send_msg(reply, sid, b'{"stream":"ORDERS","seq":7}')
    t.join(3)
    assert box and getattr(box[0], "seq", None) == 7, box


def _voluntary_switches(thread: threading.Thread) -> int:
    with open(f"/proc/self/task/{thread.native_id}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_round_trips_leave_the_io_thread_asleep(nats_url: str, clients: Callable[..., Client]) -> None:
    """Requests, flushes and synchronous publishes against a real server, one after the
    other: the callers read their answers, the I/O thread is never woken (it used to wake for
    every answer). A few wake-ups are allowed for whatever else the machine does."""
    responder = clients(nats_url)
    responder.subscribe("lead.echo", callback=lambda m: m.respond(m.data))
    responder.flush(timeout=2)
    nc = clients(nats_url)
    js = nc.jetstream()
    name = f"LEAD{os.getpid()}"
    js.create_stream(name=name, subjects=[f"lead{os.getpid()}.>"])
    try:
        for _ in range(20):
            nc.request("lead.echo", b"warm", timeout=2)
        io = nc._io_thread
        assert io is not None
        before = _voluntary_switches(io)
        for i in range(100):
            assert nc.request("lead.echo", b"%d" % i, timeout=2).data == b"%d" % i
            nc.flush(timeout=2)
            assert js.publish(f"lead{os.getpid()}.x", b"p").seq == i + 1
        woken = _voluntary_switches(io) - before
        assert woken <= 15, f"the I/O thread woke {woken} times in 300 round trips"
    finally:
        js.delete_stream(name)


def test_batched_direct_gets_do_not_wake_the_io_thread(
    nats_url: str, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batched direct gets against a real server: the caller reads the replies and watches the
    call's deadline itself, so it does not wake the I/O thread to arm that deadline (it used
    to, for every call). Counted where the wake-up is sent: the caller's pokes. (The default
    PING interval: the I/O thread sleeps longer than a call's deadline.)"""
    nc = clients(nats_url, ping_interval=120.0)
    js = nc.jetstream()
    name = f"LEADDG{os.getpid()}"
    prefix = f"leaddg{os.getpid()}"
    js.create_stream(name=name, subjects=[f"{prefix}.>"], allow_direct=True)
    try:
        for i in range(20):
            js.publish(f"{prefix}.{i}", b"v%d" % i)
        stream = js.stream(name)
        pokes: list[str] = []
        real = Client._poke

        def counted(self: Client) -> None:
            pokes.append(threading.current_thread().name)
            real(self)

        monkeypatch.setattr(Client, "_poke", counted)
        for _ in range(100):
            assert len(list(stream.direct_get_last_for([f"{prefix}.*"]))) == 20
            assert [m.seq for m in stream.direct_get_batch(seq=1, batch=5)] == [1, 2, 3, 4, 5]
        mine = pokes.count(threading.current_thread().name)
        assert mine <= 5, f"the caller woke the I/O thread {mine} times in 200 batched direct gets"
    finally:
        js.delete_stream(name)


def test_an_interrupt_before_the_lead_begins_gives_the_socket_back(
    fake_server: FakeServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between taking the read side and leading (here: as the lead is entered) must not
    keep the socket from the I/O thread: the next request is answered."""
    nc, conn = _connected(fake_server, clients)
    real = Client._lead

    def interrupted(self: Client, *args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "_lead", interrupted)
    with pytest.raises(KeyboardInterrupt):
        nc.request("svc", b"q", timeout=2)
    assert not nc._reader
    conn.expect(b"PUB svc ")  # (the interrupted request's)
    monkeypatch.setattr(Client, "_lead", real)
    t, box = _in_thread(lambda: nc.request("svc", b"again", timeout=3))
    reply, sid = _reply_to(conn, b"svc")
    conn.send_msg(reply, sid, b"answer")
    t.join(4)
    assert box and getattr(box[0], "data", None) == b"answer", box


def test_a_failed_batch_ends_its_lead_at_once(
    fake_server: FakeServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batched direct get whose machine fails (the session ends its slot) ends the caller's
    lead then, not at the call's deadline."""
    from jscore import directget as DG

    nc, conn, stream = _stream_s(fake_server, clients)

    def broken(self: Any, msg: Any, now: float) -> None:
        raise RuntimeError("injected failure in the machine")

    monkeypatch.setattr(DG.DirectGetBatch, "receive_msg", broken)
    it = stream.direct_get_batch(batch=10, seq=1, timeout=2.0)
    pub = conn.expect(b"PUB $JS.API.DIRECT.GET.S ")
    inbox = pub.split()[2].decode()
    inbox_sid = int([f for f in conn.received if f.startswith(b"SUB " + inbox.encode())][-1].split()[-1])
    t0 = time.monotonic()
    conn.send_msg(inbox, inbox_sid, b"x", headers=b"NATS/1.0\r\nNats-Stream: S\r\n\r\n")
    with pytest.raises(Exception):
        next(it)
    assert time.monotonic() - t0 < 1.0


def test_a_forked_child_never_takes_the_parents_socket(fake_server: FakeServer, clients: Callable[..., Client],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import jssync.client as client_module

    nc, _conn = _connected(fake_server, clients)
    with nc._lock:
        assert nc._take_read_locked() is not None
        nc._give_back_locked()
    monkeypatch.setattr(client_module, "_fork_generation", client_module._fork_generation + 1)
    with nc._lock:
        assert nc._take_read_locked() is None


class _CountingPoll:
    """A ``select.poll`` that counts the polls that do not sleep (a leading caller's spin)."""

    spins = 0

    def __init__(self) -> None:
        self._poll = _real_poll()

    def register(self, fd: Any, mask: int) -> None:
        self._poll.register(fd, mask)

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        if timeout == 0:
            _CountingPoll.spins += 1
        return self._poll.poll(timeout)


_real_poll = select.poll


def test_a_lone_caller_spins_a_slow_responder_stops_it_and_probes_restart_it(
    nats_url: str, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller polls without sleeping before its first wait while answers come quickly (see
    jscore.spin); against a responder that takes milliseconds it stops within a few requests;
    then one wait in PROBE_EVERY spins again. Every answer is still its own."""
    monkeypatch.setattr(select, "poll", _CountingPoll)
    responder = clients(nats_url)

    def slow(m: Any) -> None:
        time.sleep(0.003)
        m.respond(m.data)

    responder.subscribe("lead.slow", callback=slow)
    responder.subscribe("lead.fast", callback=lambda m: m.respond(m.data))
    responder.flush(timeout=2)
    nc = clients(nats_url)
    time.sleep(SHARED_HOLD)  # (the responder's flush was a wait of another thread)
    before = _CountingPoll.spins
    for _ in range(5):
        nc.flush(timeout=2)
    assert _CountingPoll.spins > before  # a new connection spins
    for i in range(6):
        assert nc.request("lead.slow", b"%d" % i, timeout=2).data == b"%d" % i
    assert nc._spin.average >= SPIN_LIMIT
    # The responder's callback thread waits for nothing: this thread is alone. Flushes are
    # answered by the server itself; only the probes spin while the average stays high.
    leads = 3 * PROBE_EVERY
    spun = 0
    for _ in range(leads):
        before = _CountingPoll.spins
        nc.flush(timeout=2)
        spun += _CountingPoll.spins > before
    assert spun >= 2, spun


def test_threads_taking_turns_at_round_trips_do_not_spin(
    nats_url: str, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads waiting for answers on one connection: a spinner would take a processor and
    the GIL from the other, so neither spins (see jscore.spin.Callers)."""
    monkeypatch.setattr(select, "poll", _CountingPoll)
    nc = clients(nats_url)
    stop = threading.Event()

    def other() -> None:
        while not stop.is_set():
            nc.flush(timeout=2)

    t = threading.Thread(target=other)
    t.start()
    try:
        for _ in range(20):
            nc.flush(timeout=2)  # (both threads are at it now)
        before = _CountingPoll.spins
        for _ in range(200):
            nc.flush(timeout=2)
        assert _CountingPoll.spins == before
    finally:
        stop.set()
        t.join(5)


def test_a_fetch_reads_its_first_message_itself(
    fake_server: FakeServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first wait of a fetch is the pull's round trip: the caller reads the answer (the I/O
    thread stays asleep); the rest of the fetch comes through the I/O thread as before."""
    monkeypatch.setattr(jssync_pull, "_FETCH_LEAD", 5.0)  # (this server answers in its own time)
    nc, conn = _connected(fake_server, clients)
    names = _feeders(nc)
    c = nc.jetstream().consumer("S", "C", bind=True)

    def run() -> list[bytes]:
        return [m.data for m in c.fetch(2, expires=3)]

    t, box = _in_thread(run)
    sub = conn.expect(b"SUB _INBOX.")
    inbox, sid = sub.split()[1].decode(), int(sub.split()[-1])
    conn.expect(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.C ")
    time.sleep(0.05)  # the caller leads by now
    conn.send_msg(inbox, sid, b"one", reply="$JS.ACK.S.C.1.1.1.1700000000000000000.1")
    wait_until(lambda: len(names) == 1, timeout=3)
    time.sleep(0.05)  # the lead has given the socket back
    conn.send_msg(inbox, sid, b"two", reply="$JS.ACK.S.C.1.2.2.1700000000000000000.0")
    t.join(3)
    assert box == [[b"one", b"two"]], box
    assert names == ["caller", "jssync-io"], names


def test_output_behind_a_poke_is_written_by_the_caller(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    """A publish (or an ack) pokes the I/O thread; a caller that queues a request before the
    I/O thread has begun its turn writes both itself, in order, rather than leave them for the
    I/O thread to write once it is scheduled. Output nobody waits for (a consume's acks) is
    left to the I/O thread, and so is everything once the I/O thread is at work."""
    nc, conn = _connected(fake_server, clients, ping_interval=30.0)  # (no timer turns meanwhile)
    nc.publish("poke.subject", b"first")  # (the subject is checked once: later publishes take no lock)
    nc.flush(timeout=2)
    wait_until(lambda: nc._io_idle, timeout=3)  # (parked)
    with nc._lock:
        nc.publish("poke.subject", b"second")  # pokes the I/O thread, which now waits for the lock
        assert not nc._io_idle and not nc._io_busy
        assert nc._conn.queued_bytes > 0
        nc._kick_locked()  # (what a consume's acks do: left for the I/O thread, which batches)
        assert nc._conn.queued_bytes > 0
        nc._kick_locked(waiting=True)  # (what a request does after queueing its frame)
        assert nc._conn.queued_bytes == 0  # written by this thread, the I/O thread still held
    assert conn.expect(b"PUB poke.subject 6\r\nsecond", timeout=2)
    wait_until(lambda: nc._io_idle, timeout=3)  # (parked again)
    with nc._lock:
        nc._io_busy = True  # the I/O thread at work: it may hold older output, so it writes
        nc.publish("poke.subject", b"third")
        nc._kick_locked(waiting=True)
        assert nc._conn.queued_bytes > 0
        nc._io_busy = False
        nc._wake_locked()
        nc._poke()
    assert conn.expect(b"PUB poke.subject 5\r\nthird", timeout=2)


def test_a_fetch_on_an_empty_stream_gives_the_socket_back(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """On an empty stream the first wait of a fetch is a long poll: the caller reads the socket
    for a few milliseconds only, then waits for the I/O thread, so other callers may lead."""
    nc, conn = _connected(fake_server, clients, ping_interval=30.0)
    c = nc.jetstream().consumer("S", "C", bind=True)
    t, box = _in_thread(lambda: c.fetch(10, expires=1.0).messages())
    conn.expect(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.C ")
    time.sleep(0.2)
    assert t.is_alive()  # still in its long poll
    assert not nc._reader  # the socket is the I/O thread's again
    t2, box2 = _in_thread(lambda: nc.request("svc", b"q", timeout=3))
    reply = conn.expect(b"PUB svc ").split()[2].decode()
    mux = [f for f in conn.received if f.startswith(b"SUB " + reply.rsplit(".", 1)[0].encode() + b".* ")]
    sid = int(mux[-1].split()[-1])
    time.sleep(0.05)
    assert nc._reader  # the request leads meanwhile
    conn.send_msg(reply, sid, b"answer")
    t2.join(3)
    assert box2 and getattr(box2[0], "data", None) == b"answer"
    t.join(5)
    assert box == [[]], box


def test_no_caller_writes_while_the_io_thread_holds_output(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """The I/O thread has taken FIRST and is about to send it (outside the lock); a flush
    queued behind it is not written by its caller ahead of FIRST."""
    nc, conn = _connected(fake_server, clients, ping_interval=30.0)
    nc.publish("ord.x", b"warm")
    nc.flush(timeout=2)
    wait_until(lambda: nc._io_idle, timeout=3)
    took = threading.Event()
    real = nc._send_fresh

    def slow_send(sock: Any, data: Any, wbuf: bytearray) -> bool:
        if b"FIRST" in bytes(data):
            took.set()
            time.sleep(0.2)
        return real(sock, data, wbuf)

    nc._send_fresh = slow_send  # type: ignore[method-assign]
    nc.publish("ord.x", b"FIRST")
    assert took.wait(3)
    nc.publish("ord.x", b"SECOND")
    nc.flush(timeout=3)
    assert conn.expect(b"PUB ord.x 6\r\nSECOND", timeout=3)
    frames = [f for f in conn.received if f.startswith(b"PUB ord.x")]
    assert frames[-2:] == [b"PUB ord.x 5\r\nFIRST\r\n", b"PUB ord.x 6\r\nSECOND\r\n"], frames


def test_a_fetch_that_cannot_lead_still_ends_by_its_client_timer(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """As over TLS: the first wait cannot take the read side; the fetch still ends by its own
    client timer, fired by the I/O thread, against a server that never answers the pull."""
    nc, conn = _connected(fake_server, clients, ping_interval=30.0)
    wait_until(lambda: nc._io_idle, timeout=3)
    nc._take_read_locked = lambda round_trip=True: None  # type: ignore[method-assign, misc]
    c = nc.jetstream().consumer("S", "C", bind=True)
    t0 = time.monotonic()
    result = c.fetch(10, expires=1.0)
    conn.expect(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.C ")
    assert result.messages() == []
    assert isinstance(result.error, FetchTimeoutError), result.error
    assert time.monotonic() - t0 < 3.0


def test_a_fetch_never_iterated_still_ends_by_its_client_timer(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """Nobody iterates the fetch and the server is silent: the machine's client timer ends it
    (its inbox is unsubscribed) about its client timeout after the start."""
    nc, conn = _connected(fake_server, clients, ping_interval=30.0)
    c = nc.jetstream().consumer("S", "C", bind=True)
    result = c.fetch(10, expires=0.5)
    sid = conn.expect(b"SUB _INBOX.").split()[-1]
    conn.expect(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.C ")
    assert conn.expect(b"UNSUB " + sid, timeout=3.0)
    assert not result.done or result.error is not None or result.messages() == []
