"""The wire protocol: frame parsing (whole, byte by byte, split anywhere), encoders, subjects."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jscore.errors import BadSubjectError, RemoteProtocolError
from jscore.headers import Headers, encode_headers
from jscore.protocol import (
    CONNECT_FIELDS,
    MAX_CONTROL_LINE,
    PING,
    PONG,
    ErrReceived,
    InfoReceived,
    MsgReceived,
    OkReceived,
    Parser,
    ParserEvent,
    PingReceived,
    PongReceived,
    check_publish_subject,
    check_queue_group,
    check_subscribe_subject,
    encode_connect,
    encode_hpub,
    encode_pub,
    encode_sub,
    encode_unsub,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HEARTBEAT_BLOCK = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\nNats-Last-Stream: 0\r\n\r\n"

# Every frame type the server sends, with the events it must parse to.
FRAMES: list[tuple[str, bytes, list[ParserEvent]]] = [
    ("ping", b"PING\r\n", [PingReceived()]),
    ("pong", b"PONG\r\n", [PongReceived()]),
    ("ok", b"+OK\r\n", [OkReceived()]),
    ("err", b"-ERR 'Unknown Protocol Operation'\r\n", [ErrReceived("Unknown Protocol Operation")]),
    ("err-unquoted", b"-ERR oops\r\n", [ErrReceived("oops")]),
    ("err-empty", b"-ERR\r\n", [ErrReceived("")]),
    (
        "info",
        b'INFO {"server_id":"S","max_payload":1048576,"headers":true}\r\n',
        [InfoReceived(info={"server_id": "S", "max_payload": 1048576, "headers": True})],
    ),
    (
        "msg",
        b"MSG foo.bar 7 5\r\nhello\r\n",
        [MsgReceived(subject="foo.bar", sid=7, reply=None, data=b"hello", headers=None, size=12)],
    ),
    (
        "msg-reply",
        b"MSG foo 1 _INBOX.r 3\r\nabc\r\n",
        [MsgReceived(subject="foo", sid=1, reply="_INBOX.r", data=b"abc", headers=None, size=14)],
    ),
    (
        "msg-empty",
        b"MSG foo 1 0\r\n\r\n",
        [MsgReceived(subject="foo", sid=1, reply=None, data=b"", headers=None, size=3)],
    ),
    (
        "msg-crlf-in-payload",
        b"MSG foo 1 6\r\n\r\nPING\r\n",
        [MsgReceived(subject="foo", sid=1, reply=None, data=b"\r\nPING", headers=None, size=9)],
    ),
    (
        "hmsg",
        b"HMSG foo 2 18 21\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n",
        [MsgReceived(subject="foo", sid=2, reply=None, data=b"abc", headers=Headers([("A", "b")]), size=24)],
    ),
    (
        "hmsg-reply",
        b"HMSG foo 2 r.x 18 21\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n",
        [MsgReceived(subject="foo", sid=2, reply="r.x", data=b"abc", headers=Headers([("A", "b")]), size=27)],
    ),
    (
        "hmsg-status",
        b"HMSG _INBOX.x 2 75 75\r\n" + HEARTBEAT_BLOCK + b"\r\n",
        [
            MsgReceived(
                subject="_INBOX.x",
                sid=2,
                reply=None,
                data=b"",
                headers=Headers([("Nats-Last-Consumer", "0"), ("Nats-Last-Stream", "0")]),
                status=100,
                description="Idle Heartbeat",
                size=83,
            )
        ],
    ),
    (
        "hmsg-503",
        b"HMSG _INBOX.x 3 16 16\r\nNATS/1.0 503\r\n\r\n\r\n",
        [MsgReceived(subject="_INBOX.x", sid=3, reply=None, data=b"", headers=Headers(), status=503, size=24)],
    ),
]
FRAME_IDS = [f[0] for f in FRAMES]
ALL_BYTES = b"".join(f[1] for f in FRAMES)
ALL_EVENTS = [e for f in FRAMES for e in f[2]]


def feed_chunks(data: bytes, cuts: list[int], parser: Parser | None = None) -> list[ParserEvent]:
    parser = parser or Parser()
    out: list[ParserEvent] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        out.extend(parser.feed(data[prev:cut]))
        prev = cut
    assert parser.buffered == 0
    return out


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(("name", "data", "expected"), FRAMES, ids=FRAME_IDS)
def test_frame_whole(name: str, data: bytes, expected: list[ParserEvent]) -> None:
    parser = Parser()
    assert parser.feed(data) == expected
    assert parser.buffered == 0


@pytest.mark.parametrize(("name", "data", "expected"), FRAMES, ids=FRAME_IDS)
def test_frame_byte_by_byte(name: str, data: bytes, expected: list[ParserEvent]) -> None:
    parser = Parser()
    got: list[ParserEvent] = []
    for i in range(len(data)):
        events = parser.feed(data[i : i + 1])
        if i < len(data) - 1:
            assert events == [], f"a frame was emitted before its last byte (at {i})"
            assert parser.buffered == i + 1
        got.extend(events)
    assert got == expected
    assert parser.buffered == 0


@pytest.mark.parametrize(("name", "data", "expected"), FRAMES, ids=FRAME_IDS)
@pytest.mark.parametrize("partial", [b"P", b"PIN", b"MSG a 1 3\r\nab", b"HMSG a 1 12 12\r\nNATS/1", b"INFO {"])
def test_frame_with_trailing_partial_frame(name: str, data: bytes, expected: list[ParserEvent], partial: bytes) -> None:
    parser = Parser()
    assert parser.feed(data + partial) == expected
    assert parser.buffered == len(partial), "the partial next frame must stay buffered"
    rest = {
        b"P": b"ING\r\n",
        b"PIN": b"G\r\n",
        b"MSG a 1 3\r\nab": b"c\r\n",
        b"HMSG a 1 12 12\r\nNATS/1": b".0\r\n\r\n\r\n",
        b"INFO {": b"}\r\n",
    }[partial]
    events = parser.feed(rest)
    assert len(events) == 1 and parser.buffered == 0
    assert events == Parser().feed(partial + rest)


def test_all_frames_glued_together() -> None:
    assert Parser().feed(ALL_BYTES) == ALL_EVENTS


def test_all_frames_byte_by_byte() -> None:
    assert feed_chunks(ALL_BYTES, list(range(1, len(ALL_BYTES)))) == ALL_EVENTS


@SETTINGS
@given(st.lists(st.integers(min_value=0, max_value=len(ALL_BYTES)), max_size=40))
def test_random_split_points_give_identical_events(cuts: list[int]) -> None:
    assert feed_chunks(ALL_BYTES, cuts) == ALL_EVENTS


@SETTINGS
@given(
    st.lists(st.sampled_from(range(len(FRAMES))), min_size=1, max_size=12),
    st.lists(st.integers(min_value=0, max_value=4096), max_size=20),
)
def test_random_frame_sequences_random_splits(order: list[int], cuts: list[int]) -> None:
    data = b"".join(FRAMES[i][1] for i in order)
    expected = [e for i in order for e in FRAMES[i][2]]
    assert feed_chunks(data, [c % (len(data) + 1) for c in cuts]) == expected


def test_feed_accepts_bytearray_and_memoryview() -> None:
    parser = Parser()
    assert parser.feed(bytearray(b"PI")) == []
    assert parser.feed(memoryview(b"NG\r\nMSG a 1 1\r\n")) == [PingReceived()]
    assert parser.feed(bytearray(b"x\r\n")) == [MsgReceived(subject="a", sid=1, reply=None, data=b"x", headers=None, size=2)]


def test_empty_feed_is_a_no_op() -> None:
    parser = Parser()
    assert parser.feed(b"") == []
    assert parser.feed(b"MSG a 1 3\r\na") == []
    assert parser.feed(b"") == []
    assert parser.buffered == len(b"MSG a 1 3\r\na")
    assert parser.feed(b"bc\r\n")[0].data == b"abc"


def test_large_payload_in_small_chunks_is_parsed_and_linear() -> None:
    size = 8 * 1024 * 1024
    payload = bytes(range(256)) * (size // 256)
    data = b"MSG big 1 %d\r\n%s\r\nPING\r\n" % (size, payload)
    parser = Parser(max_payload=size)
    events: list[ParserEvent] = []
    started = time.perf_counter()
    for i in range(0, len(data), 1024):
        events.extend(parser.feed(data[i : i + 1024]))
        assert parser.buffered <= MAX_CONTROL_LINE + size + 2
    elapsed = time.perf_counter() - started
    assert len(events) == 2 and isinstance(events[0], MsgReceived)
    assert events[0].data == payload
    assert events[1] == PingReceived()
    assert parser.buffered == 0
    # Linear: ~8k appends and one join. A quadratic re-join of the buffer on every chunk would
    # copy ~32 GiB here and take minutes.
    assert elapsed < 3.0, f"8 MiB in 1 KiB chunks took {elapsed:.2f} s"


def test_one_mib_payload_in_1k_chunks_with_headers() -> None:
    payload = b"z" * (1024 * 1024)
    block = encode_headers({"Nats-Msg-Id": "1"})
    data = b"HMSG big 1 %d %d\r\n%s%s\r\n" % (len(block), len(block) + len(payload), block, payload)
    parser = Parser()
    events: list[ParserEvent] = []
    for i in range(0, len(data), 1024):
        events.extend(parser.feed(data[i : i + 1024]))
    assert len(events) == 1
    msg = events[0]
    assert isinstance(msg, MsgReceived)
    assert msg.data == payload and msg.headers == Headers({"Nats-Msg-Id": "1"})


def test_message_size_is_subject_reply_header_and_payload() -> None:
    (msg,) = Parser().feed(b"HMSG sub 1 rep 12 15\r\nNATS/1.0\r\n\r\nabc\r\n")
    assert isinstance(msg, MsgReceived)
    assert msg.size == len("sub") + len("rep") + 15


def test_max_payload_setter_applies_to_the_next_frame() -> None:
    parser = Parser(max_payload=1024)
    assert parser.max_payload == 1024
    parser.max_payload = 10
    assert parser.max_payload == 10
    # max_payload plus the 64 KiB margin for server-added headers is still accepted ...
    ok = 10 + 64 * 1024
    assert len(parser.feed(b"MSG a 1 %d\r\n%s\r\n" % (ok, b"x" * ok))) == 1
    # ... one byte more is refused before any payload is buffered.
    with pytest.raises(RemoteProtocolError):
        parser.feed(b"MSG a 1 %d\r\n" % (ok + 1))
    assert parser.poisoned


# --------------------------------------------------------------------------- encoders


def test_encode_pub_exact() -> None:
    assert encode_pub(b"foo", None, b"hello") == b"PUB foo 5\r\nhello\r\n"
    assert encode_pub(b"foo", b"bar", b"") == b"PUB foo bar 0\r\n\r\n"
    assert encode_pub(b"foo", None, b"\r\n") == b"PUB foo 2\r\n\r\n\r\n"


def test_encode_hpub_exact() -> None:
    block = encode_headers({"A": "b"})
    assert block == b"NATS/1.0\r\nA: b\r\n\r\n"
    assert encode_hpub(b"foo", None, block, b"abc") == b"HPUB foo 18 21\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n"
    assert encode_hpub(b"foo", b"r", block, b"") == b"HPUB foo r 18 18\r\nNATS/1.0\r\nA: b\r\n\r\n\r\n"


def test_encode_sub_unsub_ping_pong_exact() -> None:
    assert encode_sub(b"foo.*", None, 1) == b"SUB foo.* 1\r\n"
    assert encode_sub(b"foo.>", b"workers", 12) == b"SUB foo.> workers 12\r\n"
    assert encode_unsub(3) == b"UNSUB 3\r\n"
    assert encode_unsub(3, 10) == b"UNSUB 3 10\r\n"
    assert encode_unsub(3, 0) == b"UNSUB 3 0\r\n"
    assert PING == b"PING\r\n" and PONG == b"PONG\r\n"


def test_encode_connect_exact_and_allow_list() -> None:
    data = encode_connect({"verbose": False, "name": "n", "headers": True})
    assert data == b'CONNECT {"verbose":false,"name":"n","headers":true}\r\n'
    fields = {k: 1 for k in CONNECT_FIELDS}
    body = encode_connect(fields)
    assert json.loads(body[len(b"CONNECT ") : -2]) == fields
    assert body.endswith(b"\r\n") and body.count(b"\r\n") == 1


@pytest.mark.parametrize(
    "extra",
    [{"evil": True}, {"auth_required": True}, {"tls_verify": False}, {"User": "x"}, {"": 1}, {"pass ": "x"}],
)
def test_encode_connect_rejects_keys_outside_the_allow_list(extra: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="allow-list"):
        encode_connect({"verbose": False, **extra})


def test_connect_allow_list_is_the_documented_one() -> None:
    assert CONNECT_FIELDS == {
        "verbose", "pedantic", "tls_required", "auth_token", "user", "pass", "name", "lang", "version",
        "protocol", "echo", "sig", "jwt", "nkey", "no_responders", "headers",
    }  # fmt: skip


def test_encode_connect_escapes_values() -> None:
    data = encode_connect({"name": 'a"\r\nPUB x 1\r\n'})
    assert data.count(b"\r\n") == 1, "a value must never inject a control line"
    assert json.loads(data[8:-2]) == {"name": 'a"\r\nPUB x 1\r\n'}


# --------------------------------------------------------------------------- round trip


def _as_delivered(frame: bytes, sid: int) -> bytes:
    """Rewrite a client PUB/HPUB frame into the MSG/HMSG the server would deliver on ``sid``."""
    line, sep, rest = frame.partition(b"\r\n")
    op, subject, *args = line.split(b" ")
    assert op in (b"PUB", b"HPUB")
    new_op = b"MSG" if op == b"PUB" else b"HMSG"
    return b" ".join([new_op, subject, str(sid).encode(), *args]) + sep + rest


_token = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=8)
_token = _token.filter(lambda t: "." not in t and t not in ("*", ">") and not any(c.isspace() for c in t))
subjects = st.lists(_token, min_size=1, max_size=6).map(".".join)
header_keys = st.text(alphabet="abcXYZ-_019!#$%&'*+.^`|~", min_size=1, max_size=12)
header_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x7f" + "".join(map(chr, range(32)))),
    max_size=20,
).map(lambda v: v.strip(" \t"))


@SETTINGS
@given(
    subject=subjects,
    reply=st.none() | subjects,
    payload=st.binary(max_size=300),
    headers=st.none() | st.lists(st.tuples(header_keys, header_values), max_size=5),
    sid=st.integers(min_value=1, max_value=2**40),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=6),
)
def test_encode_then_parse_round_trip(
    subject: str,
    reply: str | None,
    payload: bytes,
    headers: list[tuple[str, str]] | None,
    sid: int,
    cuts: list[int],
) -> None:
    subj = check_publish_subject(subject)
    rep = check_publish_subject(reply) if reply is not None else None
    if headers is None:
        frame = encode_pub(subj, rep, payload)
    else:
        frame = encode_hpub(subj, rep, encode_headers(headers), payload)
    wire = _as_delivered(frame, sid)
    events = feed_chunks(wire, [c % (len(wire) + 1) for c in cuts])
    assert len(events) == 1
    msg = events[0]
    assert isinstance(msg, MsgReceived)
    assert msg.subject == subject and msg.reply == reply and msg.sid == sid and msg.data == payload
    if headers is None:
        assert msg.headers is None
    else:
        assert msg.headers == Headers(headers)
        assert msg.status is None and msg.description is None


# --------------------------------------------------------------------------- subjects

BAD_PUBLISH_SUBJECTS = [
    "",
    " ",
    "a b",
    "a\tb",
    "a\r\nPUB x 1",
    "a\nb",
    "a..b",
    ".a",
    "a.",
    ".",
    "a.*",
    "a.>",
    "*",
    ">",
    "\x00",
    "a\x00b",
    "a\x7fb",
    "a\u00a0b",  # a Unicode space
    "a\u2028b",
    "a\ud800b",  # a lone surrogate cannot go on the wire
    "x" * 4096,
]


@pytest.mark.parametrize("subject", BAD_PUBLISH_SUBJECTS, ids=repr)
def test_bad_publish_subjects(subject: str) -> None:
    with pytest.raises(BadSubjectError):
        check_publish_subject(subject)
    with pytest.raises(BadSubjectError):
        check_publish_subject(subject, "reply subject")


@pytest.mark.parametrize("subject", ["a", "ä", "日本.語", "a.b.c", "a*b", "a>b", "$JS.API.INFO", ".".join(["t"] * 300), "x" * 1800])
def test_good_publish_subjects(subject: str) -> None:
    assert check_publish_subject(subject) == subject.encode()
    assert check_publish_subject(subject) == subject.encode()  # cached path


@pytest.mark.parametrize("subject", [None, 1, b"abc"], ids=repr)
def test_publish_subject_must_be_str(subject: object) -> None:
    with pytest.raises(BadSubjectError):
        check_publish_subject(subject)  # type: ignore[arg-type]


@pytest.mark.parametrize("subject", ["a", "a.*", "a.>", "*", ">", "*.*.>", "a.*.b", "ä.>"])
def test_good_subscribe_subjects(subject: str) -> None:
    assert check_subscribe_subject(subject) == subject.encode()


@pytest.mark.parametrize(
    "subject", ["", ">.a", "a.>.b", ">.>", "a..b", "a.", ".a", "a b", "a\tb", "a\r\nSUB x 1", "\x00", "x" * 4096], ids=repr
)
def test_bad_subscribe_subjects(subject: str) -> None:
    with pytest.raises(BadSubjectError):
        check_subscribe_subject(subject)


@pytest.mark.parametrize("queue", ["", "a b", "a\tb", "q\r\n", "q\x00", "x" * 4096, "q\udc80"], ids=repr)
def test_bad_queue_groups(queue: str) -> None:
    with pytest.raises(BadSubjectError):
        check_queue_group(queue)


@pytest.mark.parametrize("queue", ["workers", "a.b", "ä"])
def test_good_queue_groups(queue: str) -> None:
    assert check_queue_group(queue) == queue.encode()


def test_a_subject_cached_as_valid_is_never_confused_with_a_bad_one() -> None:
    assert check_publish_subject("cache.me") == b"cache.me"
    with pytest.raises(BadSubjectError):
        check_publish_subject("cache.me ")
    with pytest.raises(BadSubjectError):
        check_publish_subject("cache.>")
    # A subscribe subject with a wildcard is valid for SUB, never for PUB, whatever was cached.
    assert check_subscribe_subject("cache.>") == b"cache.>"
    with pytest.raises(BadSubjectError):
        check_publish_subject("cache.>")


@pytest.mark.parametrize("frame", [b"MSG", b"HMSG"])
def test_sids_are_checked_once_cached_and_still_refused_when_bad(frame: bytes) -> None:
    """The parser keeps the sids it has seen (digits -> int); a cached sid must give the same
    value, and a bad one must still be refused, before and after good ones."""

    def one(sid: bytes) -> bytes:
        if frame == b"MSG":
            return b"MSG s %s r.1 1\r\nx\r\n" % sid
        return b"HMSG s %s r.1 12 13\r\nNATS/1.0\r\n\r\nx\r\n" % sid

    events = Parser().feed(one(b"41") + one(b"41") + one(b"041") + one(b"5"))
    assert [e.sid for e in events] == [41, 41, 41, 5]  # type: ignore[union-attr]
    assert all(e.reply == "r.1" for e in events)  # type: ignore[union-attr]
    for bad in (b"4x", b"-1", b"\xd9\xa1"):
        with pytest.raises(RemoteProtocolError, match=f"bad {frame.decode()} sid"):
            Parser().feed(one(b"41") + one(bad))


def test_a_reply_subject_that_is_not_utf8_is_refused() -> None:
    for data in (b"MSG s 1 r.\xff 1\r\nx\r\n", b"HMSG s 1 r.\xff 12 13\r\nNATS/1.0\r\n\r\nx\r\n"):
        with pytest.raises(RemoteProtocolError, match="reply subject is not valid UTF-8"):
            Parser().feed(data)
