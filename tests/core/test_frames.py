"""PUB/HPUB frames: exact bytes of every encoder and format, the parser reading back what they
write, the connection machine using them, and jssync building no frame by hand."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jscore.connection import ConnectOptions, Connection
from jscore.errors import MaxPayloadError
from jscore.headers import Headers, encode_headers
from jscore.protocol import (
    HPUB_FMT,
    HPUB_REPLY_FMT,
    MSG_ID_BLOCK_FMT,
    PUB_FMT,
    PUB_REPLY_FMT,
    MsgReceived,
    Parser,
    check_publish_subject,
    encode_hpub,
    encode_pub,
    PING,
    PONG,
    encode_connect,
    encode_sub,
    encode_unsub,
    msg_id_frame_encoder,
    split_frames,
    validated_subject,
)
from jscore.publish import MSG_ID

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- golden bytes


@pytest.mark.parametrize(
    ("reply", "payload", "expected"),
    [
        (None, b"hello", b"PUB foo.bar 5\r\nhello\r\n"),
        (None, b"", b"PUB foo.bar 0\r\n\r\n"),
        (b"_INBOX.x.1", b"hello", b"PUB foo.bar _INBOX.x.1 5\r\nhello\r\n"),
        (b"_INBOX.x.1", b"", b"PUB foo.bar _INBOX.x.1 0\r\n\r\n"),
        (None, b"a\r\nPUB x 1\r\n", b"PUB foo.bar 12\r\na\r\nPUB x 1\r\n\r\n"),  # the payload is opaque
        (b"", b"x", b"PUB foo.bar 1\r\nx\r\n"),  # an empty reply is no reply
    ],
)
def test_encode_pub_golden(reply: bytes | None, payload: bytes, expected: bytes) -> None:
    assert encode_pub(b"foo.bar", reply, payload) == expected


BLOCK = b"NATS/1.0\r\nA: b\r\n\r\n"  # 18 bytes


@pytest.mark.parametrize(
    ("reply", "block", "payload", "expected"),
    [
        (None, BLOCK, b"abc", b"HPUB foo 18 21\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n"),
        (None, BLOCK, b"", b"HPUB foo 18 18\r\nNATS/1.0\r\nA: b\r\n\r\n\r\n"),
        (b"r.1", BLOCK, b"abc", b"HPUB foo r.1 18 21\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n"),
        (b"r.1", BLOCK, b"", b"HPUB foo r.1 18 18\r\nNATS/1.0\r\nA: b\r\n\r\n\r\n"),
        # the smallest header block there is: 12 bytes
        (None, b"NATS/1.0\r\n\r\n", b"x", b"HPUB foo 12 13\r\nNATS/1.0\r\n\r\nx\r\n"),
        # a 1000-byte payload: the sizes are decimal, not padded
        (None, BLOCK, b"p" * 1000, b"HPUB foo 18 1018\r\nNATS/1.0\r\nA: b\r\n\r\n" + b"p" * 1000 + b"\r\n"),
    ],
)
def test_encode_hpub_golden(reply: bytes | None, block: bytes, payload: bytes, expected: bytes) -> None:
    assert encode_hpub(b"foo", reply, block, payload) == expected


def test_formats_golden() -> None:
    assert PUB_FMT % (b"s", 2, b"hi") == b"PUB s 2\r\nhi\r\n"
    assert PUB_REPLY_FMT % (b"s", b"r", 2, b"hi") == b"PUB s r 2\r\nhi\r\n"
    assert HPUB_FMT % (b"s", 12, 14, b"NATS/1.0\r\n\r\n", b"hi") == b"HPUB s 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    assert (
        HPUB_REPLY_FMT % (b"s", b"r", 12, 14, b"NATS/1.0\r\n\r\n", b"hi")
        == b"HPUB s r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    )
    assert MSG_ID_BLOCK_FMT % b"w-0-7" == b"NATS/1.0\r\nNats-Msg-Id: w-0-7\r\n\r\n"


@pytest.mark.parametrize("mid", ["w-0-7", "a b", "x" * 200, "\u00e9t\u00e9-1", "%d%s"])
def test_msg_id_block_is_what_encode_headers_gives(mid: str) -> None:
    assert MSG_ID_BLOCK_FMT % mid.encode() == encode_headers([(MSG_ID, mid)])


def test_msg_id_frame_encoder_golden() -> None:
    encode = msg_id_frame_encoder(b"orders.eu", b"_INBOX.abc.", b"w1-3-", 1024 * 1024)
    # header block: "NATS/1.0\r\nNats-Msg-Id: w1-3-7\r\n\r\n" = 33 bytes
    assert encode(7, b"hello") == (
        b"HPUB orders.eu _INBOX.abc.7 33 38\r\nNATS/1.0\r\nNats-Msg-Id: w1-3-7\r\n\r\nhello\r\n"
    )
    assert encode(0, b"") == b"HPUB orders.eu _INBOX.abc.0 33 33\r\nNATS/1.0\r\nNats-Msg-Id: w1-3-0\r\n\r\n\r\n"
    # the header size grows with the index's digits
    assert encode(12345, b"x") == (
        b"HPUB orders.eu _INBOX.abc.12345 37 38\r\nNATS/1.0\r\nNats-Msg-Id: w1-3-12345\r\n\r\nx\r\n"
    )


@pytest.mark.parametrize("index", [0, 9, 10, 99, 100, 999_999, 10**12])
@pytest.mark.parametrize("payload", [b"", b"x", b"%s%d\r\n" * 10])
def test_msg_id_frame_encoder_is_encode_hpub(index: int, payload: bytes) -> None:
    """The same bytes as the general encoder, whatever the index's digits; ``%`` in the subject,
    the reply prefix or the msg id prefix is taken literally (they go into a format string)."""
    for subj, reply, prefix in [
        (b"orders.eu", b"_INBOX.abc.", b"w1-3-"),
        (b"a%s.%d", b"_R.%%.", b"%s-%d-"),
        (b"\xc3\xa9t\xc3\xa9", b"r.", b"\xc3\xa9-"),
    ]:
        encode = msg_id_frame_encoder(subj, reply, prefix, 1024 * 1024)
        ib = b"%d" % index
        assert encode(index, payload) == encode_hpub(subj, reply + ib, MSG_ID_BLOCK_FMT % (prefix + ib), payload)


def test_msg_id_frame_encoder_max_payload() -> None:
    # header block of frame 5: "NATS/1.0\r\nNats-Msg-Id: p5\r\n\r\n" = 29 bytes
    encode = msg_id_frame_encoder(b"s", b"r.", b"p", 39)
    assert encode(5, b"x" * 10).startswith(b"HPUB s r.5 29 39\r\n")  # exactly max_payload: accepted
    with pytest.raises(MaxPayloadError, match=r"frame 5: .* 40 bytes > max_payload 39"):
        encode(5, b"x" * 11)

    seen: list[tuple[int, int, int]] = []

    def too_big(index: int, size: int, limit: int) -> BaseException:
        seen.append((index, size, limit))
        return ValueError("mine")

    encode = msg_id_frame_encoder(b"s", b"r.", b"p", 39, too_big)
    with pytest.raises(ValueError, match="mine"):
        encode(10, b"x" * 10)  # one more index digit: 30 + 10 = 40
    assert seen == [(10, 40, 39)]


def test_validated_subject() -> None:
    subject = "frames.validated.%d" % random.Random().getrandbits(64)
    assert validated_subject(subject) is None
    encoded = check_publish_subject(subject)
    assert validated_subject(subject) == encoded == subject.encode()
    assert validated_subject("not a subject") is None


# --------------------------------------------------------------------------- round trip


def delivered(frame: bytes, sid: int) -> bytes:
    """The MSG/HMSG the server would deliver on ``sid`` for a client PUB/HPUB frame."""
    line, sep, rest = frame.partition(b"\r\n")
    op, subject, *args = line.split(b" ")
    assert op in (b"PUB", b"HPUB")
    return b" ".join([b"MSG" if op == b"PUB" else b"HMSG", subject, b"%d" % sid, *args]) + sep + rest


def read_back(wire: bytes, cuts: list[int]) -> list[MsgReceived]:
    parser = Parser()
    out = []
    prev = 0
    for cut in [*sorted({c % (len(wire) + 1) for c in cuts}), len(wire)]:
        out.extend(parser.feed(wire[prev:cut]))
        prev = cut
    assert parser.buffered == 0
    assert all(isinstance(e, MsgReceived) for e in out)
    return out  # type: ignore[return-value]


_token = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=8)
_token = _token.filter(lambda t: "." not in t and t not in ("*", ">") and not any(c.isspace() for c in t))
subjects = st.lists(_token, min_size=1, max_size=5).map(".".join)
msg_id_prefixes = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x7f"), max_size=20
).map(lambda t: t.lstrip(" \t"))
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
    headers=st.none() | st.lists(st.tuples(header_keys, header_values), max_size=4),
    fmt=st.booleans(),
    sid=st.integers(min_value=1, max_value=2**40),
    cuts=st.lists(st.integers(min_value=0, max_value=700), max_size=5),
)
def test_parser_reads_back_what_the_encoders_write(
    subject: str,
    reply: str | None,
    payload: bytes,
    headers: list[tuple[str, str]] | None,
    fmt: bool,
    sid: int,
    cuts: list[int],
) -> None:
    """Through the encoders and through the formats the hot paths apply themselves."""
    subj = check_publish_subject(subject)
    rep = check_publish_subject(reply) if reply is not None else None
    if headers is None:
        if not fmt:
            frame = encode_pub(subj, rep, payload)
        elif rep is None:
            frame = PUB_FMT % (subj, len(payload), payload)
        else:
            frame = PUB_REPLY_FMT % (subj, rep, len(payload), payload)
    else:
        block = encode_headers(headers)
        n = len(block) + len(payload)
        if not fmt:
            frame = encode_hpub(subj, rep, block, payload)
        elif rep is None:
            frame = HPUB_FMT % (subj, len(block), n, block, payload)
        else:
            frame = HPUB_REPLY_FMT % (subj, rep, len(block), n, block, payload)
    [msg] = read_back(delivered(frame, sid), cuts)
    assert (msg.subject, msg.reply, msg.sid, msg.data) == (subject, reply, sid, payload)
    assert msg.headers == (None if headers is None else Headers(headers))
    assert msg.status is None


@SETTINGS
@given(
    subject=subjects,
    reply_prefix=subjects,
    id_prefix=msg_id_prefixes,
    frames=st.lists(st.tuples(st.integers(min_value=0, max_value=10**15), st.binary(max_size=200)), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=6),
)
def test_parser_reads_back_msg_id_frames(
    subject: str,
    reply_prefix: str,
    id_prefix: str,
    frames: list[tuple[int, bytes]],
    cuts: list[int],
) -> None:
    encode = msg_id_frame_encoder(
        check_publish_subject(subject), check_publish_subject(reply_prefix) + b".", id_prefix.encode(), 1024 * 1024
    )
    wire = b"".join(delivered(encode(i, p), 7) for i, p in frames)
    msgs = read_back(wire, cuts)
    assert len(msgs) == len(frames)
    for msg, (i, p) in zip(msgs, frames):
        assert (msg.subject, msg.reply, msg.data) == (subject, f"{reply_prefix}.{i}", p)
        assert msg.headers == Headers([(MSG_ID, f"{id_prefix}{i}")])


# --------------------------------------------------------------------------- split_frames


def _one_frame(kind: int, subject: str, reply: str | None, payload: bytes, headers: list[tuple[str, str]]) -> bytes:
    subj = check_publish_subject(subject)
    rep = check_publish_subject(reply) if reply is not None else None
    if kind == 0:
        return encode_pub(subj, rep, payload)
    if kind == 1:
        return encode_hpub(subj, rep, encode_headers(headers or [("K", "v")]), payload)
    if kind == 2:
        return encode_sub(subj, rep, len(payload) + 1)
    if kind == 3:
        return encode_unsub(len(payload) + 1, len(headers) or None)
    if kind == 4:
        return encode_connect({"verbose": False, "name": subject})
    return PING if kind == 5 else PONG


@SETTINGS
@given(
    frames=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=6),
            subjects,
            st.none() | subjects,
            # payloads that look like frames of their own must not fool the splitter
            st.binary(max_size=60) | st.sampled_from([b"\r\nPUB x 1\r\nA\r\n", b"PING\r\n", b"\r\n\r\n"]),
            st.lists(st.tuples(header_keys, header_values), max_size=2),
        ),
        max_size=12,
    ),
    cut=st.integers(min_value=1, max_value=40),
)
def test_split_frames_gives_back_the_frames_joined(
    frames: list[tuple[int, str, str | None, bytes, list[tuple[str, str]]]], cut: int
) -> None:
    built = [_one_frame(*f) for f in frames]
    wire = bytearray(b"".join(built))
    assert split_frames(wire) == built
    if built and built[-1].startswith((b"PUB ", b"HPUB ")):
        with pytest.raises(ValueError):  # a PUB cut inside its payload is not a frame
            split_frames(wire[: len(wire) - min(cut, len(built[-1]) - 1)])


@SETTINGS
@given(data=st.binary(max_size=200) | st.lists(st.sampled_from([b"PUB a 3\r\n", b"abc", b"\r\n", b"HPUB a 2 5\r\n", b"PING\r\n", b"-1", b" "]), max_size=12).map(b"".join))
def test_split_frames_of_any_bytes_is_exact_or_refuses(data: bytes) -> None:
    try:
        frames = split_frames(data)
    except ValueError:
        return
    assert b"".join(frames) == data
    assert all(f.endswith(b"\r\n") for f in frames)


def test_split_frames_refuses_a_size_that_lies() -> None:
    with pytest.raises(ValueError):
        split_frames(b"PUB a 5\r\nabc\r\n")
    with pytest.raises(ValueError):
        split_frames(b"PUB a 1\r\nabc\r\n")
    assert split_frames(b"PUB a 3\r\nabc\r\nPING\r\n") == [b"PUB a 3\r\nabc\r\n", PING]


# --------------------------------------------------------------------------- the machine uses them


def _connected() -> Connection:
    conn = Connection(ConnectOptions(servers=("nats://a:4222",)), rng=random.Random(1))
    conn.start(0.0)
    conn.connection_made(0.0)
    conn.receive_data(b'INFO {"max_payload":1048576,"headers":true}\r\n', 0.0)
    conn.data_to_send()
    conn.receive_data(b"PONG\r\n", 0.0)
    assert conn.is_connected
    return conn


def test_connection_publishes_the_encoders_frames() -> None:
    conn = _connected()
    conn.publish("frames.a", b"one")  # checked path (maybe a first sight of the subject)
    conn.publish("frames.a", b"two")  # fast path: the subject is cached now
    conn.publish("frames.a", b"", reply="r.1")
    conn.publish("frames.a", b"x", headers={"A": "b"})
    conn.publish("frames.a", b"y", reply="r.2", headers=[("A", "b"), ("A", "c")])
    conn.publish("frames.a", memoryview(b"zz"))
    assert conn.data_to_send() == b"".join(
        [
            encode_pub(b"frames.a", None, b"one"),
            encode_pub(b"frames.a", None, b"two"),
            encode_pub(b"frames.a", b"r.1", b""),
            encode_hpub(b"frames.a", None, encode_headers({"A": "b"}), b"x"),
            encode_hpub(b"frames.a", b"r.2", encode_headers([("A", "b"), ("A", "c")]), b"y"),
            encode_pub(b"frames.a", None, b"zz"),
        ]
    )


# --------------------------------------------------------------------------- one place


_FRAME_LITERAL = re.compile(rb'b"H?PUB[ "]|H?PUB %')


def test_jssync_builds_no_frames_by_hand() -> None:
    """Every PUB/HPUB frame is laid out in jscore.protocol (cli.py and server.py aside)."""
    offenders = []
    for path in sorted((ROOT / "jssync").rglob("*.py")):
        if path.name in ("cli.py", "server.py") and path.parent.name == "jssync":
            continue
        for no, line in enumerate(path.read_bytes().splitlines(), 1):
            if _FRAME_LITERAL.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{no}: {line.strip().decode()}")
    assert not offenders, "\n".join(offenders)
