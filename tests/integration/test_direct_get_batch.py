"""Batched direct get (ADR-31) against a real nats-server: ``stream.direct_get_batch`` and
``stream.direct_get_last_for``.

TESTPLAN 56 (batch=50, max_bytes 4 KiB: ends exactly at EOB and resumes from Last-Sequence + 1
without gaps; a dropped ``204 EOB`` ends with a typed timeout by the deadline), 57 (multi_last
over 1024 matching subjects: 413 -> TooManySubjectsError; paging while a writer writes equals the
snapshot at the first page's Nats-UpTo-Sequence), and around them: deleted sequences,
start_time, next_by_subject wildcards, empty results, allow_direct false, validation before
anything is sent, and leaving a loop early.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from jscore.errors import (
    BadSubjectError,
    DirectGetNoRespondersError,
    InvalidOptionError,
    JetStreamError,
    MaxPayloadError,
    NoRespondersError,
    StreamNotFoundError,
    TimeoutError,
    TooManySubjectsError,
)
from jscore.headers import Headers
from jscore.models import PubAck, StorageType, StoredMsg
from jscore.times import parse_nats_time
from jssync import Client, JetStream, Stream
from jssync.client import shell_of
from jssync.stream import DirectGetIterator
from tests.integration import clients, wait_until
from tests.support.proxy import FaultProxy

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)

UTC = timezone.utc
EOB_FRAME = b"NATS/1.0 204 EOB"


class Env:
    """A client, its JetStream context and unique memory streams deleted at teardown."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js: JetStream = nc.jetstream(timeout=5.0)
        self.created: list[str] = []
        self.base: set[int] = set()

    def stream(self, **fields: Any) -> tuple[Stream, str]:
        name = f"DG{uuid.uuid4().hex[:10]}"
        self.created.append(name)
        prefix = name.lower()
        fields.setdefault("subjects", [f"{prefix}.>"])
        fields.setdefault("storage", StorageType.MEMORY)
        fields.setdefault("allow_direct", True)
        return self.js.create_stream(name=name, **fields), prefix

    def fill(self, subjects: list[str], payload: Callable[[int], bytes] = lambda i: b"m%d" % i) -> list[PubAck]:
        acks = [self.js.publish(s, payload(i)) for i, s in enumerate(subjects)]
        self.base = set(self.nc._session._routes)  # (the context's PubAck inbox exists from now on)
        return acks

    def inboxes(self) -> set[int]:
        """The client's subscriptions but those that existed after the last fill: the inboxes
        of direct gets still open."""
        return set(self.nc._session._routes) - self.base

    def cleanup(self) -> None:
        for name in self.created:
            try:
                self.js.delete_stream(name)
            except (StreamNotFoundError, JetStreamError, TimeoutError):
                pass


@pytest.fixture
def env(nats_url: str, clients: Callable[..., Client]) -> Iterator[Env]:
    e = Env(clients(nats_url))
    yield e
    e.cleanup()


def read_all(it: DirectGetIterator) -> list[StoredMsg]:
    return list(it)


def test_the_servers_replies_are_read_in_the_lane(env: Env) -> None:
    """nats-server's replies to a batch and a multi_last, in its exact form (with the message's
    own headers in printable ASCII too), take the connection's direct lane; a header value
    outside ASCII goes the general way; both give the same messages and rows."""
    stream, p = env.stream()
    env.fill([f"{p}.{i}" for i in range(40)])
    env.js.publish(f"{p}.own", b"o", headers={"Own": "x", "Nats-Msg-Id": "id-1"})
    env.js.publish(f"{p}.uni", b"u", headers={"Own": "\u00fc"})
    lane = shell_of(env.nc).session.conn._lane
    before = lane.direct_read
    got = read_all(stream.direct_get_batch(seq=1, batch=100, timeout=5.0))
    assert [(m.seq, m.subject, m.data, m.headers) for m in got] == [
        (i + 1, f"{p}.{i}", b"m%d" % i, None) for i in range(40)] + [
        (41, f"{p}.own", b"o", Headers([("Own", "x"), ("Nats-Msg-Id", "id-1")])),
        (42, f"{p}.uni", b"u", Headers([("Own", "\u00fc")]))]
    assert lane.direct_read - before == 41  # (the last one goes the general way)
    last = read_all(stream.direct_get_last_for([f"{p}.>"], timeout=5.0))
    assert sorted(m.seq for m in last) == list(range(1, 43)) and lane.direct_read - before == 82
    rows = list(stream._direct_rows(1, next_by_subject=None, batch=100, max_bytes=None, timeout=5.0))
    assert [(r[0], r[1], r[2], r[5]) for r in rows] == [(m.subject, m.seq, m.data, m.stream) for m in got]
    for r, m in zip(rows[:41], got[:41]):  # (a row's time stays the server's text, its own headers text)
        t = parse_nats_time(r[4])  # type: ignore[arg-type]
        assert (t, t.nanosecond) == (m.time, m.time.nanosecond)  # type: ignore[union-attr]
    assert [r[3] for r in rows[39:41]] == ["", "Own: x\r\nNats-Msg-Id: id-1\r\n"]
    assert lane.direct_read - before == 123
    assert not lane.direct_heads  # (each get's inbox was disarmed at its end)


# =========================================================================== TESTPLAN 56


def test_batches_end_at_eob_and_resume_without_gaps(env: Env) -> None:
    stream, p = env.stream()
    acks = env.fill([f"{p}.{i % 7}" for i in range(240)], lambda i: b"%05d" % i + b"x" * 300)
    deleted = {5, 50, 51, 52, 99, 240}
    for seq in deleted:
        stream.delete_msg(seq)
    stored = [a.seq for a in acks if a.seq not in deleted]

    got: list[StoredMsg] = []
    batches: list[tuple[int, int, int | None]] = []  # (messages, payload bytes, num_pending)
    cursor = 1
    while True:
        t0 = time.monotonic()
        it = stream.direct_get_batch(seq=cursor, batch=50, max_bytes=4096, timeout=5.0)
        page = read_all(it)
        assert time.monotonic() - t0 < 2.0, "a batch must end at its EOB, not at the deadline"
        assert it.reason == "eob" and it.error is None
        assert 1 <= len(page) <= 50
        got += page
        batches.append((len(page), sum(len(m.data) for m in page), it.num_pending))
        # The EOB's cursor: Last-Sequence + 1, and what is left after it.
        assert it.last_seq == page[-1].seq and it.next_seq == page[-1].seq + 1
        assert it.num_pending == sum(1 for s in stored if s > page[-1].seq)
        if not it.num_pending:
            break
        cursor = it.next_seq
    assert [m.seq for m in got] == stored  # every message once, in order, deleted ones skipped
    for m in got:
        assert m.stream == stream.name and m.subject == f"{p}.{(m.seq - 1) % 7}"
        assert m.data.startswith(b"%05d" % (m.seq - 1)) and m.time is not None and m.headers is None
    # max_bytes (4 KiB), not batch (50), ended the batches: about a dozen 305-byte messages each.
    assert len(batches) > 240 // 50 + 1
    assert all(n < 50 and size <= 4096 + 305 for n, size, _ in batches)
    assert not env.inboxes(), "every batch released its inbox"


def test_lost_eob_ends_with_a_typed_timeout_by_the_deadline(
    nats_url: str, clients: Callable[..., Client], fault_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = fault_proxy(nats_url)
    env = Env(clients(proxy.url))
    try:
        stream, p = env.stream()
        env.fill([f"{p}.a"] * 30, lambda i: b"y" * 200)
        rule = proxy.drop_frames("down", lambda f: EOB_FRAME in f, count=1)
        received: list[int] = []
        it = stream.direct_get_batch(batch=50, max_bytes=4096, timeout=1.0)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as exc:
            for m in it:
                received.append(m.seq)
        elapsed = time.monotonic() - t0
        assert isinstance(exc.value, builtins_timeout()) and "204 EOB" in str(exc.value)
        assert 0.9 <= elapsed <= 2.0, f"timed out after {elapsed:.2f} s, deadline 1 s"
        assert rule.matched == 1
        assert received == list(range(1, len(received) + 1)) and 0 < len(received) < 30
        assert it.reason == "timeout" and it.next_seq == len(received) + 1
        assert list(it) == []  # over: the error is raised once
        # The EOB-less batch does not poison anything: resume where it stopped.
        rest = stream.direct_get_batch(seq=it.next_seq, batch=50, timeout=2.0)
        assert [m.seq for m in rest] == list(range(len(received) + 1, 31)) and rest.reason == "eob"
        assert not env.inboxes()
    finally:
        env.cleanup()


def builtins_timeout() -> type[BaseException]:
    import builtins

    return builtins.TimeoutError


def test_a_lost_message_is_detected(
    nats_url: str, clients: Callable[..., Client], fault_proxy: Callable[..., FaultProxy]
) -> None:
    """Not just the EOB: any lost reply breaks the Nats-Last-Sequence chain."""
    from jscore.errors import BatchGapError

    proxy = fault_proxy(nats_url)
    env = Env(clients(proxy.url))
    try:
        stream, p = env.stream()
        env.fill([f"{p}.a"] * 10)
        proxy.drop_frames("down", lambda f: b"Nats-Sequence: 4\r\n" in f, count=1)
        it = stream.direct_get_batch(batch=10, timeout=2.0)
        received: list[int] = []
        with pytest.raises(BatchGapError):
            for m in it:
                received.append(m.seq)
        assert received == [1, 2, 3] and it.next_seq == 4
    finally:
        env.cleanup()


# =========================================================================== batch forms


def test_deleted_sequences_are_skipped(env: Env) -> None:
    stream, p = env.stream()
    env.fill([f"{p}.a"] * 8)
    for seq in (1, 3, 4, 8):
        stream.delete_msg(seq)
    it = stream.direct_get_batch(batch=10)
    assert [m.seq for m in it] == [2, 5, 6, 7]
    assert it.num_pending == 0 and it.next_seq == 8
    it = stream.direct_get_batch(seq=3, batch=2)
    assert [m.seq for m in it] == [5, 6] and it.num_pending == 1


def test_start_time(env: Env) -> None:
    stream, p = env.stream()
    env.fill([f"{p}.old"] * 3)
    time.sleep(0.05)  # wall-clock separation of the stored timestamps, not synchronization
    middle = datetime.now(UTC)
    time.sleep(0.05)
    env.fill([f"{p}.new"] * 4)
    it = stream.direct_get_batch(start_time=middle, batch=3)
    msgs = list(it)
    assert [m.seq for m in msgs] == [4, 5, 6] and all(m.subject == f"{p}.new" for m in msgs)
    assert it.num_pending == 1 and it.next_seq == 7
    assert [m.seq for m in stream.direct_get_batch(start_time=datetime(2000, 1, 1, tzinfo=UTC), batch=100)] == list(
        range(1, 8)
    )
    assert list(stream.direct_get_batch(start_time=datetime.now(UTC).replace(year=2100), batch=5)) == []


def test_next_by_subject_with_wildcards(env: Env) -> None:
    stream, p = env.stream()
    subjects = [f"{p}.a.1", f"{p}.b.1", f"{p}.a.2", f"{p}.a.x.y", f"{p}.b.2", f"{p}.a.3"]
    env.fill(subjects)
    assert [m.subject for m in stream.direct_get_batch(next_by_subject=f"{p}.a.*", batch=10)] == [
        f"{p}.a.1", f"{p}.a.2", f"{p}.a.3"
    ]  # fmt: skip
    assert [m.seq for m in stream.direct_get_batch(next_by_subject=f"{p}.a.>", batch=10)] == [1, 3, 4, 6]
    it = stream.direct_get_batch(seq=2, next_by_subject=f"{p}.*.2", batch=1)
    assert [m.subject for m in it] == [f"{p}.a.2"] and it.num_pending == 1 and it.next_seq == 4
    assert [m.subject for m in stream.direct_get_batch(seq=it.next_seq, next_by_subject=f"{p}.*.2", batch=5)] == [
        f"{p}.b.2"
    ]
    assert [m.seq for m in stream.direct_get_batch(next_by_subject=f"{p}.b.1", batch=10)] == [2]


def test_nothing_to_return_is_an_empty_iteration(env: Env) -> None:
    stream, p = env.stream()
    env.fill([f"{p}.a"] * 3)
    it = stream.direct_get_batch(seq=50, batch=10)
    assert list(it) == [] and it.reason == "empty" and it.num_pending == 0 and it.next_seq == 50
    assert list(stream.direct_get_batch(next_by_subject=f"{p}.none", batch=10)) == []
    assert list(stream.direct_get_last_for(f"{p}.none.>")) == []
    assert not env.inboxes()


def test_headers_of_stored_messages_are_kept(env: Env) -> None:
    stream, p = env.stream()
    env.js.publish(f"{p}.h", b"v", headers={"Own": "1", "Multi": ["a", "b"]})
    (m,) = list(stream.direct_get_batch(batch=5))
    assert m.headers is not None and m.headers["Own"] == "1" and m.headers.get_all("Multi") == ["a", "b"]
    assert not any(k.lower().startswith("nats-") for k in m.headers)
    assert m == stream.get_msg(1, direct=False)  # the same StoredMsg as STREAM.MSG.GET


# =========================================================================== TESTPLAN 57: multi_last


def test_more_than_1024_matching_subjects_is_a_typed_413(env: Env) -> None:
    stream, p = env.stream()
    for i in range(1025):
        env.nc.publish(f"{p}.k.{i}", b"v")
    env.nc.flush()
    wait_until(lambda: stream.info().state.messages == 1025, timeout=10, what="1025 messages stored")
    cases: list[dict[str, Any]] = [{}, {"batch": 10}, {"up_to_seq": 1025}]
    for kwargs in cases:
        t0 = time.monotonic()
        with pytest.raises(TooManySubjectsError) as exc:
            list(stream.direct_get_last_for(f"{p}.k.>", **kwargs))
        assert time.monotonic() - t0 < 2.0
        assert exc.value.code == 413 and exc.value.description == "Too Many Results"
    # The limit counts matches: up to the 1024th message it is fine, paged 100 at a time.
    it = stream.direct_get_last_for(f"{p}.k.>", up_to_seq=1024, batch=100)
    msgs = list(it)
    assert [m.subject for m in msgs] == [f"{p}.k.{i}" for i in range(1024)]
    assert it.pages == 11 and it.up_to_seq == 1024 and it.error is None
    # ... and so is a list of more than 1024 filters of which few exist (no client-side cap).
    few = list(stream.direct_get_last_for([f"{p}.k.{i}" for i in range(0, 5000, 500)]))
    assert [m.seq for m in few] == [1, 501, 1001]
    assert not env.inboxes()


def test_paging_with_a_concurrent_writer_equals_the_snapshot(
    env: Env, nats_url: str, clients: Callable[..., Client]
) -> None:
    stream, p = env.stream()
    subjects = [f"{p}.s.{i:02d}" for i in range(60)]
    ledger: list[tuple[str, int, bytes]] = []  # every acknowledged write: (subject, seq, data)
    for rnd in range(2):
        for s in subjects:
            data = f"{s}#{rnd}".encode()
            ledger.append((s, env.js.publish(s, data).seq, data))

    writer_js = clients(nats_url).jetstream()
    stop = threading.Event()
    writer_ledger: list[tuple[str, int, bytes]] = []

    def writer() -> None:  # a concurrent writer on another connection, until the read is done
        n = 0
        while not stop.is_set():
            s = subjects[(n * 7) % len(subjects)]
            data = f"{s}#w{n}".encode()
            writer_ledger.append((s, writer_js.publish(s, data).seq, data))
            n += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        it = stream.direct_get_last_for(f"{p}.s.>", batch=7, timeout=5.0)
        result: list[StoredMsg] = []
        for m in it:
            assert it.pages <= 9, "paging must stop at the snapshot"
            result.append(m)
            # ... and writes from the reader itself between pages, to every subject still to come:
            # a pager without the snapshot would return these newer values.
            if len(result) % 7 == 0:
                for s in subjects[::5]:
                    data = f"{s}#r{len(result)}".encode()
                    ledger.append((s, env.js.publish(s, data).seq, data))
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    up_to = it.up_to_seq
    assert up_to is not None and it.error is None and it.reason == "eob"
    assert it.pages == 9  # 60 subjects, 7 a page

    # The expected snapshot, from the acknowledged writes alone: per subject, the last write <= up_to.
    expected: dict[str, tuple[int, bytes]] = {}
    for s, seq, data in sorted(ledger + writer_ledger, key=lambda w: w[1]):
        if seq <= up_to:
            expected[s] = (seq, data)
    assert {m.subject: (m.seq, m.data) for m in result} == expected
    assert [m.seq for m in result] == sorted(seq for seq, _ in expected.values())  # stream order, no duplicates
    newer = [w for w in ledger + writer_ledger if w[1] > up_to]
    assert len({s for s, _, _ in newer}) >= 12, "writes after the snapshot must have happened"
    # The server agrees when asked for the same snapshot in one go.
    assert [(m.subject, m.seq) for m in stream.direct_get_last_for(f"{p}.s.>", up_to_seq=up_to)] == [
        (m.subject, m.seq) for m in result
    ]


def test_last_for_as_of_a_time_and_a_sequence(env: Env) -> None:
    stream, p = env.stream()
    env.fill([f"{p}.u.name", f"{p}.u.surname", f"{p}.u.address"], lambda i: [b"Bob", b"Smith", b"1 Main"][i])
    time.sleep(0.05)  # wall-clock separation of the stored timestamps, not synchronization
    middle = datetime.now(UTC)
    time.sleep(0.05)
    env.js.publish(f"{p}.u.address", b"10 Oak")
    now = {m.subject: m.data for m in stream.direct_get_last_for(f"{p}.u.>")}
    assert now[f"{p}.u.address"] == b"10 Oak"
    for it in (
        stream.direct_get_last_for(f"{p}.u.>", up_to_seq=3),
        stream.direct_get_last_for([f"{p}.u.address", f"{p}.u.name"], up_to_time=middle, batch=1),
    ):
        got = {m.subject: m.data for m in it}
        assert got[f"{p}.u.address"] == b"1 Main" and got[f"{p}.u.name"] == b"Bob"
    assert it.up_to_seq == 3 and it.pages == 2


# =========================================================================== allow_direct false, validation, early exit


def test_without_allow_direct_there_is_no_responder(env: Env) -> None:
    """ADR-31 says such a request times out; this client asks for no-responder statuses, so the
    server answers 503 at once: DirectGetNoRespondersError (a JetStreamError and a
    NoRespondersError), well before the timeout."""
    stream, p = env.stream(allow_direct=False)
    env.fill([f"{p}.a"])
    for call in (
        lambda: list(stream.direct_get_batch(batch=5, timeout=5.0)),
        lambda: list(stream.direct_get_last_for(f"{p}.>", timeout=5.0)),
        lambda: stream.direct_get(1, timeout=5.0),
    ):
        t0 = time.monotonic()
        with pytest.raises(DirectGetNoRespondersError, match="allow_direct") as exc:
            call()
        assert time.monotonic() - t0 < 1.0
        assert isinstance(exc.value, JetStreamError) and isinstance(exc.value, NoRespondersError)
    assert not env.inboxes()
    assert stream.get_msg(1).seq == 1  # STREAM.MSG.GET still reads it


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s, p: s.direct_get_batch(batch=0), InvalidOptionError),
        (lambda s, p: s.direct_get_batch(batch=-1), InvalidOptionError),
        (lambda s, p: s.direct_get_batch(batch=5, max_bytes=0), InvalidOptionError),
        (lambda s, p: s.direct_get_batch(batch=5, max_bytes=-1), InvalidOptionError),
        (lambda s, p: s.direct_get_batch(seq=1, start_time=datetime.now(UTC), batch=5), InvalidOptionError),
        (lambda s, p: s.direct_get_batch(start_time=datetime(2026, 1, 1), batch=5), InvalidOptionError),
        (lambda s, p: s.direct_get_batch(seq=0, batch=5), InvalidOptionError),
        (lambda s, p: s.direct_get_batch(next_by_subject="a b", batch=5), BadSubjectError),
        (lambda s, p: s.direct_get_batch(batch=5, timeout=0), InvalidOptionError),
        (lambda s, p: s.direct_get_last_for([]), InvalidOptionError),
        (lambda s, p: s.direct_get_last_for(""), BadSubjectError),
        (lambda s, p: s.direct_get_last_for([f"{p}.a", "bad subject"]), BadSubjectError),
        (lambda s, p: s.direct_get_last_for(f"{p}.>", up_to_seq=1, up_to_time=datetime.now(UTC)), InvalidOptionError),
        (lambda s, p: s.direct_get_last_for(f"{p}.>", batch=0), InvalidOptionError),
        (lambda s, p: s.direct_get_last_for(f"{p}.>", up_to_time="yesterday"), InvalidOptionError),
        (lambda s, p: s.direct_get_last_for([f"{p}.{i:06d}" for i in range(80_000)]), MaxPayloadError),
    ],
)
def test_validation_happens_before_anything_is_sent(env: Env, call: Any, error: type[Exception]) -> None:
    stream, p = env.stream()
    monitor = env.nc.subscribe("$JS.API.DIRECT.GET.>")
    env.nc.flush()
    subs = set(env.nc._session._routes)
    out = env.nc.stats["msgs_out"]
    with pytest.raises(error):
        call(stream, p)
    assert env.nc.stats["msgs_out"] == out and set(env.nc._session._routes) == subs
    env.nc.flush()
    with pytest.raises(TimeoutError):
        monitor.next_msg(timeout=0.05)


def test_leaving_the_loop_early_unsubscribes(env: Env) -> None:
    stream, p = env.stream()
    env.fill([f"{p}.a"] * 40)
    for m in stream.direct_get_batch(batch=40):
        assert m.seq == 1
        # (open until the end of batch arrives: the I/O thread may have had it all already)
        assert len(env.inboxes()) <= 1
        break
    wait_until(lambda: not env.inboxes(), timeout=2, what="the inbox to be unsubscribed")

    with stream.direct_get_last_for(f"{p}.>") as it:
        assert len(env.inboxes()) <= 1
    assert not env.inboxes() and it.reason in ("stopped", "eob")
    assert list(it) == []

    it = stream.direct_get_batch(batch=40)
    assert next(it).seq == 1
    it.close()
    assert not env.inboxes() and list(it) == [] and it.error is None
    # The client is fine afterwards.
    assert [m.seq for m in stream.direct_get_batch(seq=39, batch=5)] == [39, 40]


def test_an_abandoned_iterator_never_blocks_a_thread_holding_the_client_lock(env: Env) -> None:
    """The garbage collector may drop an iterator on a thread that holds the client lock (the
    I/O thread, for one). Its cleanup must not wait for that lock: it hands the unsubscribe to
    a helper thread, which runs once the lock is free."""
    stream, p = env.stream()
    env.fill([f"{p}.a"] * 40)
    it = stream.direct_get_batch(batch=40)
    assert next(it).seq == 1 and len(env.inboxes()) <= 1
    with env.nc._lock:
        del it  # a deadlock here would hang the test (and fail it on its timeout)
    wait_until(lambda: not env.inboxes(), timeout=2, what="the inbox to be unsubscribed")


def test_concurrent_readers_each_get_every_message_in_order(env: Env) -> None:
    """The iterator hands messages over through a buffer and wakes its reader once per arrival
    of replies: readers faster and slower than the I/O thread, several at once on one client,
    each get every message of their own call, in order, then the end."""
    stream, p = env.stream()
    subjects = [f"{p}.k{i}" for i in range(300)]
    for s in subjects:
        env.js.publish_async(s, s.encode())
    env.js.publish_async_complete(timeout=10)
    env.fill([])  # (the inboxes from here on are the direct gets')
    failures: list[str] = []

    def reader(slow: bool) -> None:
        for _ in range(8):
            it = stream.direct_get_last_for(f"{p}.>", batch=120)
            got = []
            for m in it:
                got.append(m.subject)
                if m.data != m.subject.encode():
                    failures.append(f"{m.subject}: {m.data!r}")
                if slow and len(got) % 37 == 0:
                    time.sleep(0.002)  # (the I/O thread runs ahead: the buffer fills)
            if got != subjects or it.error is not None or it.reason != "eob" or it.pages != 3:
                failures.append(f"{len(got)} of {len(subjects)}, {it.reason} {it.error!r}, {it.pages} pages")

    threads = [threading.Thread(target=reader, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a reader hung"
    assert failures == []
    wait_until(lambda: not env.inboxes(), timeout=2, what="every inbox to be unsubscribed")
