"""The key-value rules of jscore.kv, pure: validation, the bucket's stream config, entries from
stored and delivered messages, the watcher's decisions, purge_deletes' choice, the snapshot."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jscore import kv as K
from jscore.errors import InvalidKeyError, InvalidOptionError, KeyDeletedError, KeyNotFoundError
from jscore.headers import Headers, parse_header_block
from jscore.jsapi import stream_config_request
from jscore.kv import KeyValueEntry, KeyValueOp, WatchOptions, WatchState
from jscore.models import DiscardPolicy, StorageType
from jscore.ordered import OrderedConsumerCreated, OrderedConsumerOptions
from jscore.protocol import MsgReceived
from tests.core.test_ordered_machine import INBOX, H, consume_opts

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


# ============================================================================ keys and buckets


@pytest.mark.parametrize("key", ["a", "A.b.c", "x/y=z", "-_.-_", "1.2.3", "a.b.c.d.e.f", "=" * 100])
def test_valid_keys(key: str) -> None:
    assert K.check_key(key) == key
    assert K.key_subject("B", key) == f"$KV.B.{key}"


@pytest.mark.parametrize("key", ["", ".a", "a.", "a..b", "a b", "a*", "a.>", "ä", "a\tb", "a\r\n", None, 5, b"a"])
def test_invalid_keys(key: Any) -> None:
    with pytest.raises(InvalidKeyError):
        K.check_key(key)
    assert issubclass(InvalidKeyError, ValueError)


@given(st.text(max_size=12))
def test_key_rule_matches_its_model(key: str) -> None:
    model = bool(re.fullmatch(r"[-/_=.A-Za-z0-9]+", key)) and "" not in key.split(".")
    try:
        K.check_key(key)
        ok = True
    except InvalidKeyError:
        ok = False
    assert ok == model


@pytest.mark.parametrize("f", ["a.*", "*", ">", "a.>", "*.b.>", "a.b"])
def test_valid_filters(f: str) -> None:
    assert K.check_filter(f) == f


@pytest.mark.parametrize("f", ["a*", "a.>.b", ">.a", "", "a..*", "*a", "a.b>"])
def test_invalid_filters(f: str) -> None:
    with pytest.raises(InvalidKeyError):
        K.check_filter(f)


def test_filter_subjects() -> None:
    assert K.filter_subjects("B", []) == ["$KV.B.>"]
    assert K.filter_subjects("B", ["a.*", "b"]) == ["$KV.B.a.*", "$KV.B.b"]


@pytest.mark.parametrize("bucket", ["", "a.b", "a b", "a*", "ä", None])
def test_invalid_buckets(bucket: Any) -> None:
    with pytest.raises(InvalidOptionError):
        K.check_bucket(bucket)


# ============================================================================ the stream config


def test_bucket_config_is_the_shared_layout() -> None:
    cfg = K.bucket_config("CFG", history=5, ttl=30.0, max_value_size=1024, replicas=3, storage="memory")
    body = json.loads(stream_config_request(cfg))
    assert body["name"] == "KV_CFG" and body["subjects"] == ["$KV.CFG.>"]
    assert body["max_msgs_per_subject"] == 5
    assert body["max_age"] == 30 * 10**9
    assert body["duplicate_window"] == 30 * 10**9  # no longer than the TTL
    assert body["max_msg_size"] == 1024 and body["max_msgs"] == -1 and body["max_bytes"] == -1
    assert body["allow_rollup_hdrs"] is True and body["deny_delete"] is True and body["allow_direct"] is True
    assert body["discard"] == DiscardPolicy.NEW.value and body["storage"] == StorageType.MEMORY.value
    assert body["num_replicas"] == 3
    assert "allow_msg_ttl" not in body and "subject_delete_marker_ttl" not in body


def test_bucket_config_defaults_and_limit_markers() -> None:
    body = json.loads(stream_config_request(K.bucket_config("B")))
    assert body["max_msgs_per_subject"] == 1 and body["duplicate_window"] == 120 * 10**9
    assert body["max_age"] == 0
    marked = json.loads(stream_config_request(K.bucket_config("B", limit_marker_ttl=5)))
    assert marked["allow_msg_ttl"] is True and marked["subject_delete_marker_ttl"] == 5 * 10**9


@pytest.mark.parametrize("fields", [dict(history=0), dict(history=65), dict(history=True), dict(ttl=-1),
                                    dict(replicas=0), dict(limit_marker_ttl=-2), dict(limit_marker_ttl=0.5)])
def test_bucket_config_refuses(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionError):
        K.bucket_config("B", **fields)


# ============================================================================ entries


def test_operation_of() -> None:
    assert K.operation_of(None) is KeyValueOp.PUT
    assert K.operation_of(Headers({"KV-Operation": "DEL"})) is KeyValueOp.DEL
    assert K.operation_of(Headers({"kv-operation": "PURGE", "Nats-Rollup": "sub"})) is KeyValueOp.PURGE
    assert K.operation_of(Headers({"Nats-Marker-Reason": "MaxAge"})) is KeyValueOp.PURGE
    assert K.operation_of(Headers({"Nats-Marker-Reason": "Purge"})) is KeyValueOp.PURGE
    assert K.operation_of(Headers({"Nats-Marker-Reason": "Remove"})) is KeyValueOp.DEL
    assert K.operation_of(Headers({"Other": "x"})) is KeyValueOp.PUT



@pytest.mark.parametrize(
    ("headers", "op"),
    [
        ({"KV-Operation": "del"}, KeyValueOp.PUT),  # values match exactly, as nats.go reads them
        ({"KV-Operation": " DEL"}, KeyValueOp.DEL),  # (the header parser trims values)
        ({"KV-Operation": "Purge"}, KeyValueOp.PUT),
        ({"KV-Operation": "PUT", "Nats-Marker-Reason": "Remove"}, KeyValueOp.PUT),
        ({"KV-Operation": "", "Nats-Marker-Reason": "Remove"}, KeyValueOp.DEL),  # an empty one falls through
        ({"Nats-Marker-Reason": ""}, KeyValueOp.PUT),  # found by fuzz/fuzz_kv.py: read as a purge, value lost
        ({"Nats-Marker-Reason": "maxage"}, KeyValueOp.PUT),
        ({"Nats-Marker-Reason": "Other"}, KeyValueOp.PUT),
    ],
)
def test_operation_of_reads_headers_as_nats_go(headers: dict[str, str], op: KeyValueOp) -> None:
    """A message that is not a marker keeps its value: only the exact values nats.go reads as
    markers are markers (an unknown or empty ``Nats-Marker-Reason`` was read as a purge)."""
    block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    parsed, _, _ = parse_header_block(block.encode())
    assert K.operation_of(parsed) is op
    entry = K.entry_from_stored("B", "$KV.B.k", 5, b"value", parsed, T0)
    assert entry.operation is op and entry.value == (b"value" if op is KeyValueOp.PUT else b"")


@given(st.lists(st.tuples(
    st.sampled_from(["KV-Operation", "kv-operation", "Nats-Marker-Reason", "NATS-MARKER-REASON", "X-KV-Operation",
                     "Nats-Msg-Size", "Other"]),
    st.sampled_from(["DEL", "PURGE", "Remove", "MaxAge", "Purge", "", "1", "x KV-Operation: DEL", "Nats-Marker-Reason:"]),
), max_size=4))
def test_operation_of_reads_an_unsplit_block_as_its_pairs(pairs: list[tuple[str, str]]) -> None:
    """A block not split yet is read without splitting when it names neither header; the same
    operation as its pairs give."""
    block = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" if v else f"{k}:\r\n" for k, v in pairs) + "\r\n").encode()
    parsed, _, _ = parse_header_block(block)
    assert K.operation_of(parsed) is K.operation_of(Headers(parse_header_block(block)[0].items()))


def test_entries() -> None:
    e = K.entry_from_stored("B", "$KV.B.a.b", 7, b"v", None, T0)
    assert (e.bucket, e.key, e.value, e.revision, e.created, e.delta, e.operation) == (
        "B", "a.b", b"v", 7, T0, 0, KeyValueOp.PUT)
    d = K.entry_from_stored("B", "$KV.B.a", 8, b"junk", Headers({"KV-Operation": "DEL"}), T0)
    assert d.operation is KeyValueOp.DEL and d.value == b""
    w = K.entry_from_delivery("B", "$KV.B.k", b"x", None, 3, T0, 4)
    assert (w.revision, w.delta) == (3, 4)
    assert issubclass(KeyDeletedError, KeyNotFoundError)


def test_snapshot_entries_leaves_out_deleted_keys() -> None:
    es = [
        K.entry_from_stored("B", "$KV.B.a", 1, b"1", None, T0),
        K.entry_from_stored("B", "$KV.B.b", 2, b"2", None, T0),
        K.entry_from_stored("B", "$KV.B.a", 3, b"", Headers({"KV-Operation": "PURGE"}), T0),
        K.entry_from_stored("B", "$KV.B.b", 4, b"3", None, T0),
    ]
    snap = K.snapshot_entries("B", es)
    assert {k: v.value for k, v in snap.items()} == {"b": b"3"}


def test_purge_keep() -> None:
    marker = KeyValueEntry(bucket="B", key="k", value=b"", revision=1, created=T0, operation=KeyValueOp.DEL)
    assert K.purge_keep(marker, None, T0 + timedelta(minutes=10)) == 1
    assert K.purge_keep(marker, None, T0 + timedelta(minutes=31)) == 0
    assert K.purge_keep(marker, 0, T0) == 0
    assert K.purge_keep(marker, 5, T0 + timedelta(seconds=6)) == 0


# ============================================================================ the watcher


def _d(w: WatchState, seq: int, pending: int, key: str = "k", op: str | None = None, data: bytes = b"v") -> list[Any]:
    h = Headers({"KV-Operation": op}) if op else None
    out = w.delivered(f"$KV.B.{key}", data, h, seq, T0, pending)
    return [None if e is None else (e.key, e.revision, e.operation.value, e.value, e.delta) for e in out]


def test_watch_marker_after_the_initial_values() -> None:
    w = WatchState("B", WatchOptions())
    assert w.created(2) == []
    assert _d(w, 1, 1, "a") == [("a", 1, "PUT", b"v", 1)]
    assert _d(w, 2, 0, "b") == [("b", 2, "PUT", b"v", 0), None]
    assert _d(w, 3, 0, "a") == [("a", 3, "PUT", b"v", 0)]  # once only
    assert w.created(0) == []  # a later consumer (after a reset) changes nothing


def test_watch_marker_at_once_when_empty() -> None:
    w = WatchState("B", WatchOptions())
    assert w.created(0) == [None]
    assert _d(w, 5, 0) == [("k", 5, "PUT", b"v", 0)]


def test_updates_only_never_yields_the_marker() -> None:
    w = WatchState("B", WatchOptions(updates_only=True))
    assert w.created(0) == []
    assert _d(w, 1, 0) == [("k", 1, "PUT", b"v", 0)]
    assert WatchOptions(updates_only=True).deliver_policy == "new"
    assert WatchOptions(include_history=True).deliver_policy == "all"
    assert WatchOptions().deliver_policy == "last_per_subject"
    with pytest.raises(InvalidOptionError):
        WatchOptions(include_history=True, updates_only=True)


def test_ignore_deletes_still_ends_the_initial_values() -> None:
    w = WatchState("B", WatchOptions(ignore_deletes=True))
    w.created(2)
    assert _d(w, 1, 1, "a") == [("a", 1, "PUT", b"v", 1)]
    assert _d(w, 2, 0, "b", op="DEL") == [None]
    assert _d(w, 3, 0, "b", op="PURGE") == []


def test_meta_only_leaves_values_out() -> None:
    w = WatchState("B", WatchOptions(meta_only=True))
    assert _d(w, 1, 0, data=b"big") == [("k", 1, "PUT", b"", 0), None]


def test_a_repeated_revision_is_dropped() -> None:
    w = WatchState("B", WatchOptions())
    w.created(1)
    assert _d(w, 4, 0) == [("k", 4, "PUT", b"v", 0), None]
    assert _d(w, 4, 0) == []
    assert _d(w, 3, 0) == []


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from([None, "DEL", "PURGE"])), max_size=20),
       st.booleans(), st.booleans())
def test_watch_delivers_in_order_and_one_marker(ops: list[tuple[str, str | None]], ignore: bool, updates: bool) -> None:
    w = WatchState("B", WatchOptions(ignore_deletes=ignore, updates_only=updates))
    out: list[Any] = list(w.created(len(ops)))
    for i, (key, op) in enumerate(ops):
        out += _d(w, i + 1, len(ops) - i - 1, key, op)
    markers = out.count(None)
    assert markers == (0 if updates else 1)
    revs = [e[1] for e in out if e is not None]
    assert revs == sorted(revs)
    if ignore:
        assert all(e[2] == "PUT" for e in out if e is not None)
    if not updates:
        assert out[-1] is None  # the marker comes after every initial value


# ============================================================================ the ordered machine's report


def test_the_ordered_machine_reports_num_pending_of_each_consumer() -> None:
    h = H(consume_opts(), ordered=OrderedConsumerOptions(report_created=True))
    c = h.creates()[-1]
    name = json.loads(c.body)["config"]["name"]
    body = json.dumps({"stream_name": "S", "name": name, "config": {"ack_policy": "none"}, "num_pending": 12,
                       "delivered": {"consumer_seq": 0, "stream_seq": 0}}).encode()
    h.recv(MsgReceived(INBOX + (c.reply_token or ""), 1, None, body, None))
    assert h.of(OrderedConsumerCreated) == [OrderedConsumerCreated(serial=1, num_pending=12)]


def test_the_ordered_machine_does_not_report_unless_asked() -> None:
    h = H(consume_opts())
    h.created()
    assert h.of(OrderedConsumerCreated) == []


# ============================================================================ the watch machine


class W:
    """Drives a WatchMachine the way the session does, in virtual time."""

    def __init__(self, options: WatchOptions, max_messages: int = 4) -> None:
        from jscore.ordered import OrderedConsumerState, OrderedMachine
        from jscore.pull import resolve_consume_options

        self.now = 0.0
        ordered = OrderedConsumerOptions(filter_subjects=("$KV.B.>",), report_created=True,
                                         headers_only=options.meta_only)
        self.cursor = OrderedConsumerState("KV_B", ordered, name_prefix="P")
        inner = OrderedMachine(self.cursor, resolve_consume_options(max_messages=max_messages, expires=2.0,
                                                                     heartbeat=0.5), self.now)
        self.m = K.WatchMachine(inner, WatchState("B", options), self.now)
        self.sent: list[Any] = []
        self.changes: list[Any] = []
        self.other: list[Any] = []
        self.pump()

    def pump(self) -> None:
        from jscore.machine import SendRequested

        for e in self.m.drain_events():
            if isinstance(e, SendRequested):
                self.sent.append(e)
            elif isinstance(e, K.WatchChanged):
                self.changes.append(e)
            else:
                self.other.append(e)

    def pulls(self) -> list[Any]:
        return [s for s in self.sent if ".CONSUMER.MSG.NEXT." in s.subject]

    def created(self, num_pending: int) -> None:
        c = [s for s in self.sent if ".CONSUMER.CREATE." in s.subject][-1]
        name = json.loads(c.body)["config"]["name"]
        body = json.dumps({"stream_name": "KV_B", "name": name, "config": {"ack_policy": "none"},
                           "num_pending": num_pending, "delivered": {"consumer_seq": 0, "stream_seq": 0}}).encode()
        self.m.receive_msg(MsgReceived(INBOX + (c.reply_token or ""), 1, None, body, None), self.now)
        self.pump()

    def deliver(self, sseq: int, key: str, pending: int, op: str | None = None, data: bytes = b"v") -> None:
        reply = f"$JS.ACK.KV_B.{self.cursor.name}.1.{sseq}.{sseq}.1700000000000000000.{pending}"
        headers = Headers({"KV-Operation": op}) if op else None
        self.m.receive_msg(MsgReceived(f"$KV.B.{key}", 1, reply, data, headers, size=100), self.now)
        self.pump()

    def shown(self) -> list[Any]:
        return [None if c.entry is None else (c.entry.key, c.entry.revision, c.entry.operation.value)
                for c in self.changes]


def test_watch_machine_turns_deliveries_into_entries_and_the_marker() -> None:
    w = W(WatchOptions())
    w.created(2)
    w.deliver(1, "a", 1)
    w.deliver(2, "b", 0, op="DEL")
    assert w.shown() == [("a", 1, "PUT"), ("b", 2, "DEL"), None]
    assert [c.size for c in w.changes] == [100, 100, 0]
    assert w.changes[0].entry.created == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
    w.deliver(3, "a", 0)
    assert w.shown()[-1] == ("a", 3, "PUT")


def test_watch_machine_marker_at_once_on_an_empty_bucket() -> None:
    w = W(WatchOptions())
    assert w.shown() == []
    w.created(0)
    assert w.shown() == [None]
    assert not w.m.finished and w.m.next_deadline() is not None


def test_watch_machine_reports_what_the_application_never_sees_as_taken() -> None:
    # max_messages 4: the first pull asks for 4; four ignored deletes must free the buffer for
    # the next pull by themselves (nobody will take them from a queue).
    w = W(WatchOptions(ignore_deletes=True), max_messages=4)
    w.created(10)
    assert len(w.pulls()) == 1
    for seq in range(1, 5):
        w.deliver(seq, f"k{seq}", 10 - seq, op="DEL")
    assert w.shown() == []
    assert len(w.pulls()) >= 2, "the skipped deletes did not free the buffer"


def test_watch_machine_without_takes_a_full_buffer_waits() -> None:
    w = W(WatchOptions(), max_messages=4)
    w.created(10)
    for seq in range(1, 5):
        w.deliver(seq, f"k{seq}", 10 - seq)
    assert len(w.changes) == 4 and len(w.pulls()) == 1  # buffered until the application takes them
    from jscore.pull import MessagesTaken

    w.m.handle(MessagesTaken(count=4, size=400), w.now)
    w.pump()
    assert len(w.pulls()) == 2


def _delivery(w: W, sseq: int, key: str, pending: int, op: str | None, data: bytes) -> MsgReceived:
    reply = f"$JS.ACK.KV_B.{w.cursor.name}.1.{sseq}.{sseq}.{1700000000000000000 + sseq * 1001}.{pending}"
    headers = parse_header_block(f"NATS/1.0\r\nKV-Operation: {op}\r\n\r\n".encode())[0] if op else None
    return MsgReceived(f"$KV.B.{key}", 1, reply, data, headers, size=90 + len(data))


_watch_step = st.one_of(
    st.tuples(st.just("run"), st.lists(st.tuples(st.sampled_from(["a", "b", "c.d"]), st.sampled_from([None, "DEL", "PURGE"]),
                                                 st.booleans()), min_size=1, max_size=6)),
    st.tuples(st.just("take"), st.integers(min_value=1, max_value=4)),
)


@given(
    options=st.sampled_from([WatchOptions(), WatchOptions(ignore_deletes=True), WatchOptions(meta_only=True),
                             WatchOptions(include_history=True), WatchOptions(updates_only=True)]),
    pending=st.integers(min_value=0, max_value=12),
    steps=st.lists(_watch_step, max_size=6),
)
def test_a_watch_reads_runs_as_it_reads_their_messages_one_by_one(options: WatchOptions, pending: int, steps: list[Any]) -> None:
    """Runs of deliveries (as the connection gives them, with or without the delivery lane's
    cursors) give the same entries, marker, notifications and buffer accounting as the same
    messages one by one: the pending count and the time come from each message's ack subject."""
    from jscore.jsmsg import ack_cursor
    from jscore.protocol import MsgsReceived
    from jscore.pull import MessagesTaken

    ws = [W(options, max_messages=5) for _ in range(3)]
    for w in ws:
        w.created(pending)
    seq, left = 0, pending
    for kind, arg in steps:
        if kind == "take":
            for w in ws:
                w.m.handle(MessagesTaken(count=arg, size=arg * 100), w.now)
                w.pump()
            continue
        made = []
        for key, op, keep_pending in arg:
            seq += 1
            left = left if keep_pending else max(0, left - 1)
            made.append((seq, key, left, op, b"v%d" % seq))
        one, run, lane = ws
        for spec in made:
            one.m.receive_msg(_delivery(one, *spec), one.now)
            one.pump()
        msgs = [_delivery(run, *spec) for spec in made]
        run.m.receive_msgs(MsgsReceived(1, msgs, sum(m.size for m in msgs)), run.now)
        run.pump()
        msgs = [_delivery(lane, *spec) for spec in made]
        lane.m.receive_msgs(MsgsReceived(1, msgs, sum(m.size for m in msgs), [ack_cursor(m.reply or "") for m in msgs]),
                            lane.now)  # type: ignore[misc]
        lane.pump()
    want = [repr(c) for c in ws[0].changes]
    for w in ws[1:]:
        assert [repr(c) for c in w.changes] == want
        assert [repr(o) for o in w.other] == [repr(o) for o in ws[0].other]
        assert w.m.inner.delivered == ws[0].m.inner.delivered
        # (what the application never sees is reported taken after each message one by one, after
        # the whole run in a run: the pulls' sizes may differ, what is buffered after it may not)
        assert (w.m.inner._buffered_messages, w.m.inner._buffered_bytes) == (
            ws[0].m.inner._buffered_messages, ws[0].m.inner._buffered_bytes)
        assert bool(w.pulls()) == bool(ws[0].pulls())


def test_a_watch_run_gives_each_entry_its_time_and_delta() -> None:
    from jscore.protocol import MsgsReceived

    w = W(WatchOptions())
    w.created(3)
    msgs = [_delivery(w, 1, "a", 2, None, b"x"), _delivery(w, 2, "b", 1, "DEL", b""), _delivery(w, 3, "a", 0, None, b"y")]
    w.m.receive_msgs(MsgsReceived(1, msgs, sum(m.size for m in msgs)), w.now)
    w.pump()
    assert w.shown() == [("a", 1, "PUT"), ("b", 2, "DEL"), ("a", 3, "PUT"), None]
    entries = [c.entry for c in w.changes[:3]]
    assert [e.delta for e in entries] == [2, 1, 0]
    assert [e.value for e in entries] == [b"x", b"", b"y"]
    assert entries[0].created == datetime(2023, 11, 14, 22, 13, 20, 1001 // 1000, tzinfo=timezone.utc)
    assert entries[2].created == datetime(2023, 11, 14, 22, 13, 20, 3003 // 1000, tzinfo=timezone.utc)


def test_a_missing_bucket_error_is_made_from_the_stream_error_once() -> None:
    from jscore.errors import BucketNotFoundError, StreamNotFoundError

    stream_error = StreamNotFoundError(404, 10059, "stream not found")
    missing = BucketNotFoundError.of(stream_error, "cfg")
    assert isinstance(missing, StreamNotFoundError) and missing.__cause__ is stream_error
    assert (missing.code, missing.err_code) == (404, 10059) and "bucket 'cfg' not found" in str(missing)
    assert BucketNotFoundError.of(missing, "other") is missing


def test_a_key_or_filter_over_the_subject_limit_is_refused_before_sending() -> None:
    """Keys and filters the character rules accept can still make a subject over the server's
    1800-byte limit with the bucket's prefix (found by the kv fuzz target): building the
    subject refuses them with InvalidKeyError, and one byte less is accepted."""
    from jscore.protocol import MAX_SUBJECT_BYTES

    room = MAX_SUBJECT_BYTES - len("$KV.B.")
    assert K.key_subject("B", "k" * room).endswith("k")
    assert K.filter_subjects("B", ["a." * ((room - 1) // 2) + ">"])
    with pytest.raises(InvalidKeyError, match="too long"):
        K.key_subject("B", "k" * (room + 1))
    with pytest.raises(InvalidKeyError, match="too long"):
        K.filter_subjects("B", ["a." * (room // 2) + "b>"[: 1] + ".>"])
