"""Malformed server input (TESTPLAN "Malformed and bad inputs", server->client protocol).

Every seed is checked with the fuzz invariant (whole, byte by byte and split feeds give the same
events, or all raise ``RemoteProtocolError`` and nothing else; a parser that raised is poisoned;
buffering stays bounded). Where the design is clear the outcome is asserted too.
"""

from __future__ import annotations

import pytest

from fuzz.fuzz_wire import check_wire, feed
from jscore import events as ev
from jscore.errors import RemoteProtocolError
from jscore.headers import Headers
from jscore.protocol import (
    DEFAULT_MAX_PAYLOAD,
    MAX_CONTROL_LINE,
    MAX_INFO_LINE,
    PAYLOAD_MARGIN,
    ErrReceived,
    InfoReceived,
    MsgReceived,
    OkReceived,
    Parser,
    PingReceived,
    PongReceived,
)
from tests.core.test_connection import Harness

ERROR = "error"  # must raise RemoteProtocolError (whole, byte by byte, split)
PARTIAL = "partial"  # no event, no error yet: the bytes stay buffered waiting for more
EITHER = "either"  # the design leaves it open: only the invariant is checked


def hmsg(block: bytes, payload: bytes = b"", subject: bytes = b"a", sid: bytes = b"1") -> bytes:
    return b"HMSG %s %s %d %d\r\n%s%s\r\n" % (subject, sid, len(block), len(block) + len(payload), block, payload)


def msg(subject: str = "a", sid: int = 1, data: bytes = b"abc", reply: str | None = None, **kw: object) -> MsgReceived:
    size = len(subject) + len(reply or "") + kw.pop("extra", 0) + len(data)  # type: ignore[operator]
    kw.setdefault("headers", None)
    return MsgReceived(subject=subject, sid=sid, reply=reply, data=data, size=size, **kw)  # type: ignore[arg-type]


HEARTBEAT = (
    b"HMSG _INBOX.x 2 75 75\r\nNATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\nNats-Last-Stream: 0\r\n\r\n\r\n"
)
BIG_BLOCK = b"NATS/1.0\r\nBig: " + b"x" * (64 * 1024 + 1 - 19) + b"\r\n\r\n"
assert len(BIG_BLOCK) == 64 * 1024 + 1

SEEDS: list[tuple[str, bytes, object]] = [
    # --- baselines
    ("PING", b"PING\r\n", [PingReceived()]),
    ("PONG", b"PONG\r\n", [PongReceived()]),
    ("+OK", b"+OK\r\n", [OkReceived()]),
    ("-ERR", b"-ERR 'x'\r\n", [ErrReceived("x")]),
    ("INFO {}", b"INFO {}\r\n", [InfoReceived(info={})]),
    ("MSG", b"MSG a 1 3\r\nabc\r\n", [msg()]),
    ("MSG reply", b"MSG a 1 r 3\r\nabc\r\n", [msg(reply="r")]),
    ("HMSG empty block", b"HMSG a 1 12 12\r\nNATS/1.0\r\n\r\n\r\n", [msg(data=b"", headers=Headers(), extra=12)]),
    # The TESTPLAN lists `HMSG a 1 r 16 19 ...` as a baseline, but its sizes are WRONG: the
    # block "NATS/1.0\r\nA: b\r\n\r\n" is 18 bytes, so hdr=16/total=19 must be rejected (the
    # payload is not followed by CRLF and the block would not end with a blank line). With the
    # right sizes (18 21) it parses.
    ("HMSG testplan sizes 16 19", b"HMSG a 1 r 16 19\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n", ERROR),
    (
        "HMSG fixed sizes 18 21",
        b"HMSG a 1 r 18 21\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n",
        [msg(reply="r", headers=Headers([("A", "b")]), extra=18)],
    ),
    (
        "heartbeat",
        HEARTBEAT,
        [
            msg(
                subject="_INBOX.x",
                sid=2,
                data=b"",
                headers=Headers([("Nats-Last-Consumer", "0"), ("Nats-Last-Stream", "0")]),
                status=100,
                description="Idle Heartbeat",
                extra=75,
            )
        ],
    ),
    # --- op / keyword
    ("leading space", b" PING\r\n", ERROR),
    ("Px", b"Px", PARTIAL),
    ("Px CRLF", b"Px\r\n", ERROR),
    ("PIx CRLF", b"PIx\r\n", ERROR),
    ("POx CRLF", b"POx\r\n", ERROR),
    ("ZOO CRLF", b"ZOO\r\n", ERROR),
    ("Mx", b"Mx\r\n", ERROR),
    ("MSGx", b"MSGx\r\n", ERROR),
    ("-x", b"-x\r\n", ERROR),
    ("-ERx", b"-ERx\r\n", ERROR),
    ("+x", b"+x\r\n", ERROR),
    ("+Ox", b"+Ox\r\n", ERROR),
    ("PINGx", b"PINGx\r\n", ERROR),
    ("PING arg", b"PING x\r\n", ERROR),
    ("INFO blank", b"INFO  \r\n", ERROR),
    ("INFO no body", b"INFO\r\n", ERROR),
    ("lowercase ping", b"ping\r\n", EITHER),
    ("lowercase msg", b"msg a 1 3\r\nabc\r\n", EITHER),
    ("PING trailing blanks", b"PING \t \r\n", [PingReceived()]),
    ("PING CR spaces LF", b"PING  \r  \n", PARTIAL),  # strict CRLF: never a line end
    ("NUL line", b"\x00\r\n", ERROR),
    ("NUL inside op", b"PI\x00NG\r\n", ERROR),
    ("bare LF", b"\n", PARTIAL),
    ("bare LF between frames", b"PING\nPONG\r\n", ERROR),
    ("bare CR", b"PING\r", PARTIAL),
    ("bare CR never LF", b"PING\rPONG\r", PARTIAL),
    ("empty line", b"\r\n", ERROR),
    # --- MSG arguments
    ("MSG two spaces", b"MSG  foo\r\n", ERROR),
    ("MSG no args", b"MSG \r\n", ERROR),
    ("MSG one arg", b"MSG a\r\n", ERROR),
    ("MSG two args", b"MSG foo 1\r\n", ERROR),
    ("MSG sid word", b"MSG foo bar 1\r\n", ERROR),  # rejected on the control line, before the payload
    ("MSG size word", b"MSG foo bar 1 baz\r\n", ERROR),
    ("MSG sid x", b"MSG a x 3\r\nabc\r\n", ERROR),
    ("MSG sid -1", b"MSG a -1 3\r\nabc\r\n", ERROR),
    ("MSG size -1", b"MSG a 1 -1\r\n", ERROR),
    ("MSG size 3a", b"MSG a 1 3a\r\nabc\r\n", ERROR),
    ("MSG size +3", b"MSG a 1 +3\r\nabc\r\n", ERROR),
    ("MSG size unicode digits", "MSG a 1 ３\r\nabc\r\n".encode(), ERROR),
    ("MSG size 2^64+1", b"MSG a 1 18446744073709551617\r\n", ERROR),
    ("MSG size 23 digits", b"MSG a 1 99999999999999999999999\r\n", ERROR),
    ("MSG size over cap", b"MSG a 1 %d\r\n" % (DEFAULT_MAX_PAYLOAD + PAYLOAD_MARGIN + 1), ERROR),
    ("MSG size at cap", b"MSG a 1 %d\r\n" % (DEFAULT_MAX_PAYLOAD + PAYLOAD_MARGIN), PARTIAL),
    ("MSG tab after op", b"MSG\ta\t1\t3\r\nabc\r\n", ERROR),
    ("MSG tabs between args", b"MSG a\t1\t3\r\nabc\r\n", EITHER),
    ("MSG unknown sid", b"MSG a 999 3\r\nabc\r\n", [msg(sid=999)]),  # the parser has no sids
    ("MSG 5 args", b"MSG a 1 r 3 x\r\nabc\r\n", ERROR),
    ("MSG bad utf8 subject", b"MSG \xff 1 3\r\nabc\r\n", ERROR),
    # --- framing
    ("size larger than sent, EOF", b"MSG a 1 10\r\nabc", PARTIAL),
    ("size smaller than payload", b"MSG a 1 2\r\nabc\r\n", ERROR),  # no skip-to-newline resync
    ("payload then LF only", b"MSG a 1 3\r\nabc\nPING\r\n", ERROR),
    ("payload then CR X", b"MSG a 1 3\r\nabc\rXPING\r\n", ERROR),
    ("payload then nothing", b"MSG a 1 3\r\nabc", PARTIAL),
    ("two MSGs glued", b"MSG a 1 3\r\nabcMSG a 1 3\r\nabc\r\n", ERROR),
    # --- HMSG
    ("HMSG hdr > total", b"HMSG a 1 10 5\r\n", ERROR),  # rejected before any payload
    ("HMSG hdr 0", b"HMSG a 1 0 3\r\nabc\r\n", ERROR),
    ("HMSG hdr = total", hmsg(b"NATS/1.0\r\nA: b\r\n\r\n"), [msg(data=b"", headers=Headers([("A", "b")]), extra=18)]),
    ("HMSG hdr < 12", b"HMSG a 1 11 11\r\nNATS/1.0\r\n\r\n\r\n", ERROR),
    ("HMSG hdr 11 partial", b"HMSG a 1 11 11\r\n", ERROR),
    ("HMSG block not NATS/1.0", hmsg(b"XATS/1.0\r\n\r\n"), ERROR),
    ("HMSG NATS/2.0", hmsg(b"NATS/2.0\r\n\r\n"), ERROR),
    ("HMSG missing blank line", hmsg(b"NATS/1.0\r\nA: b\r\n"), ERROR),
    ("HMSG 100", hmsg(b"NATS/1.0 100\r\n\r\n"), [msg(data=b"", headers=Headers(), status=100, extra=16)]),
    ("HMSG 4O9 X", hmsg(b"NATS/1.0 4O9 X\r\n\r\n"), ERROR),
    ("HMSG 42", hmsg(b"NATS/1.0 42\r\n\r\n"), ERROR),
    ("HMSG 409 no description", hmsg(b"NATS/1.0 409\r\n\r\n"), [msg(data=b"", headers=Headers(), status=409, extra=16)]),
    (
        "HMSG 204 EOB with payload",
        hmsg(b"NATS/1.0 204 EOB\r\n\r\n", b"data"),
        [msg(data=b"data", headers=Headers(), status=204, description="EOB", extra=20)],
    ),
    ("HMSG line without colon", hmsg(b"NATS/1.0\r\nNoColon\r\n\r\n"), ERROR),
    ("HMSG key with space", hmsg(b"NATS/1.0\r\nA B: c\r\n\r\n"), ERROR),
    ("HMSG folded line", hmsg(b"NATS/1.0\r\nA: b\r\n c\r\n\r\n"), ERROR),
    ("HMSG folded tab line", hmsg(b"NATS/1.0\r\nA: b\r\n\tc\r\n\r\n"), ERROR),
    ("HMSG invalid UTF-8", hmsg(b"NATS/1.0\r\nA: \xff\xfe\r\n\r\n"), ERROR),
    ("HMSG 64 KiB+1 block", hmsg(BIG_BLOCK), [msg(data=b"", headers=Headers([("Big", "x" * (64 * 1024 + 1 - 19))]), extra=len(BIG_BLOCK))]),
    (
        "HMSG repeated Status",
        hmsg(b"NATS/1.0\r\nStatus: 1\r\nStatus: 2\r\n\r\n"),
        [msg(data=b"", headers=Headers([("Status", "1"), ("Status", "2")]), extra=34)],
    ),
    (
        "HMSG odd pending values",
        hmsg(b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: -5|abc|1e309|18446744073709551616\r\n\r\n"),
        EITHER,
    ),
    (
        "HMSG Nats-Pin-Id twice",
        hmsg(b"NATS/1.0\r\nNats-Pin-Id: a\r\nNats-Pin-Id: b\r\n\r\n", b"m"),
        [msg(data=b"m", headers=Headers([("Nats-Pin-Id", "a"), ("Nats-Pin-Id", "b")]), extra=44)],
    ),
    ("HMSG sid word", b"HMSG a x 12 12\r\n", ERROR),
    ("HMSG 3 args", b"HMSG a 1 12\r\n", ERROR),
    ("HMSG 6 args", b"HMSG a 1 r 12 12 x\r\n", ERROR),
    ("HMSGx", b"HMSGx a 1 12 12\r\n", ERROR),
    ("HMSG alone", b"HMSG\r\n", ERROR),
    # --- INFO
    ("INFO invalid JSON", b'INFO {"a":\r\n', ERROR),
    ("INFO array", b"INFO []\r\n", ERROR),
    ("INFO string", b'INFO "x"\r\n', ERROR),
    ("INFO number", b"INFO 1\r\n", ERROR),
    ("INFO null", b"INFO null\r\n", ERROR),
    ("INFO trailing garbage", b"INFO {} x\r\n", ERROR),
    ("INFO duplicate keys", b'INFO {"a":1,"a":2}\r\n', EITHER),
    ("INFO deep nesting", b'INFO {"a":' + b"[" * 6000, PARTIAL),
    ("INFO deep nesting CRLF", b'INFO {"a":' + b"[" * 6000 + b"\r\n", ERROR),
    ("INFO deep but closed", b'INFO {"a":' + b"[" * 3000 + b"]" * 3000 + b"}\r\n", EITHER),
    ("INFO lone surrogate", b'INFO {"a":"\\ud800"}\r\n', EITHER),
    ("INFO NUL escape", b'INFO {"connect_urls":["\\u0000"]}\r\n', [InfoReceived(info={"connect_urls": ["\x00"]})]),
    ("INFO 8 KiB", b'INFO {"x":"' + b"y" * 8192 + b'"}\r\n', [InfoReceived(info={"x": "y" * 8192})]),
    # --- -ERR texts
    ("-ERR no text", b"-ERR\r\n", [ErrReceived("")]),
    ("-ERR unquoted", b"-ERR Unknown Protocol Operation\r\n", [ErrReceived("Unknown Protocol Operation")]),
    ("-ERR stale", b"-ERR 'Stale Connection'\r\n", [ErrReceived("Stale Connection")]),
    ("-ERR auth", b"-ERR 'Authorization Violation'\r\n", [ErrReceived("Authorization Violation")]),
    ("-ERR expired", b"-ERR 'User Authentication Expired'\r\n", [ErrReceived("User Authentication Expired")]),
    (
        "-ERR permissions queue",
        b"-ERR 'Permissions Violation for Subscription to \"a\" using queue \"q\"'\r\n",
        [ErrReceived('Permissions Violation for Subscription to "a" using queue "q"')],
    ),
    ("-ERR max payload", b"-ERR 'Maximum Payload Violation'\r\n", [ErrReceived("Maximum Payload Violation")]),
    ("-ERR long text", b"-ERR '" + b"e" * 4000 + b"'\r\n", [ErrReceived("e" * 4000)]),
    ("-ERR too long", b"-ERR '" + b"e" * MAX_CONTROL_LINE + b"'\r\n", ERROR),
    ("-ERR bad utf8", b"-ERR '\xff'\r\n", [ErrReceived("\ufffd")]),
]


@pytest.mark.parametrize(("name", "data", "expect"), SEEDS, ids=[s[0] for s in SEEDS])
def test_seed(name: str, data: bytes, expect: object) -> None:
    whole = check_wire(data, max_payload=DEFAULT_MAX_PAYLOAD)
    if expect == ERROR:
        assert whole.error is not None, f"{data[:80]!r} must be rejected, parsed as {whole.events!r}"
    elif expect == PARTIAL:
        assert whole.error is None and whole.events == []
        parser = Parser()
        assert parser.feed(data) == []
        assert parser.buffered == len(data), "an incomplete frame stays buffered"
    elif expect == EITHER:
        pass  # check_wire already asserted the invariant
    else:
        assert whole.error is None, f"{data[:80]!r} must parse, got {whole.error!r}"
        assert whole.events == expect


@pytest.mark.parametrize(("name", "data"), [(n, d) for n, d, e in SEEDS if e == ERROR], ids=[s[0] for s in SEEDS if s[2] == ERROR])
def test_error_poisons_the_parser(name: str, data: bytes) -> None:
    parser = Parser()
    with pytest.raises(RemoteProtocolError):
        parser.feed(data)
    assert parser.poisoned and parser.buffered == 0
    with pytest.raises(RemoteProtocolError):
        parser.feed(b"PING\r\n")
    with pytest.raises(RemoteProtocolError):
        parser.feed(b"")


def test_valid_frames_before_an_error_are_returned_when_fed_separately() -> None:
    parser = Parser()
    assert parser.feed(b"PING\r\n") == [PingReceived()]
    with pytest.raises(RemoteProtocolError):
        parser.feed(b"ZOO\r\n")
    result = feed(b"PING\r\nZOO\r\n", [6])
    assert result.events == [PingReceived()] and result.error is not None


# --------------------------------------------------------------------------- bounded buffering


def test_control_line_cap_trickle_feed() -> None:
    # nats-server TestMaxControlLineNonClientUpperBound: 4097 bytes without CRLF, one at a time.
    parser = Parser()
    line = b"X" * (MAX_CONTROL_LINE + 1)
    for i in range(MAX_CONTROL_LINE):
        assert parser.feed(line[i : i + 1]) == []
        assert parser.buffered == i + 1
    with pytest.raises(RemoteProtocolError, match="too long"):
        parser.feed(line[-1:])  # the 4097th byte: the line can no longer fit the cap
    assert parser.poisoned


def test_control_line_of_exactly_the_cap_is_accepted_byte_by_byte() -> None:
    data = b"PING" + b" " * (MAX_CONTROL_LINE - 4) + b"\r\n"
    parser = Parser()
    events = []
    peak = 0
    for i in range(len(data)):
        events.extend(parser.feed(data[i : i + 1]))
        peak = max(peak, parser.buffered)
    assert events == [PingReceived()]
    assert peak == MAX_CONTROL_LINE + 1, "the cap plus a CR waiting for its LF"


def test_control_line_one_over_the_cap_is_rejected_whole() -> None:
    with pytest.raises(RemoteProtocolError):
        Parser().feed(b"PING" + b" " * (MAX_CONTROL_LINE - 3) + b"\r\n")


def test_ten_mib_line_fails_bounded() -> None:
    parser = Parser()
    chunk = b"Z" * 65536
    peak = 0
    with pytest.raises(RemoteProtocolError):
        for _ in range(160):  # 10 MiB
            parser.feed(chunk)
            peak = max(peak, parser.buffered)
    assert peak <= MAX_CONTROL_LINE + 1


def test_ten_mib_line_trickled_in_small_chunks_fails_bounded() -> None:
    parser = Parser()
    peak = 0
    with pytest.raises(RemoteProtocolError):
        for _ in range(10 * 1024 * 1024 // 100):
            parser.feed(b"M" * 100)
            peak = max(peak, parser.buffered)
    assert peak <= MAX_CONTROL_LINE + 1


def test_eight_kib_info_line_is_accepted_byte_by_byte() -> None:
    data = b'INFO {"connect_urls":["' + b"h" * 8192 + b':4222"]}\r\n'
    result = feed(data, range(1, len(data)))
    assert result.error is None
    assert result.events == [InfoReceived(info={"connect_urls": ["h" * 8192 + ":4222"]})]


def _info_line(content_len: int) -> bytes:
    head, tail = b'INFO {"x":"', b'"}'
    return head + b"y" * (content_len - len(head) - len(tail)) + tail


def test_info_line_of_exactly_the_info_cap_is_accepted() -> None:
    data = _info_line(MAX_INFO_LINE) + b"\r\n"
    parser = Parser()
    events = []
    for i in range(0, len(data), 65536):
        events.extend(parser.feed(data[i : i + 65536]))
    assert len(events) == 1 and isinstance(events[0], InfoReceived)


def test_info_line_over_one_mib_fails_bounded() -> None:
    data = _info_line(MAX_INFO_LINE + 1) + b"\r\n"
    parser = Parser()
    peak = 0
    with pytest.raises(RemoteProtocolError):
        for i in range(0, len(data), 65536):
            parser.feed(data[i : i + 65536])
            peak = max(peak, parser.buffered)
    assert peak <= MAX_INFO_LINE + 1
    with pytest.raises(RemoteProtocolError):
        Parser().feed(data)


def test_oversized_sizes_fail_on_the_control_line() -> None:
    for line in (
        b"MSG a 1 99999999999999999999\r\n",
        b"HMSG a 1 12 99999999999999999999\r\n",
        b"HMSG a 1 99999999999999999999 12\r\n",
        b"MSG a 1 %d\r\n" % (DEFAULT_MAX_PAYLOAD + PAYLOAD_MARGIN + 1),
        b"HMSG a 1 12 %d\r\n" % (DEFAULT_MAX_PAYLOAD + PAYLOAD_MARGIN + 1),
        b"HMSG a 1 10 5\r\n",
        b"MSG a x 1\r\n",
        b"HMSG a x 12 12\r\n",
    ):
        parser = Parser()
        with pytest.raises(RemoteProtocolError):
            parser.feed(line)


def test_hmsg_409_without_description() -> None:
    (m,) = Parser().feed(hmsg(b"NATS/1.0 409\r\n\r\n"))
    assert isinstance(m, MsgReceived)
    assert m.status == 409 and m.description is None


def test_testplan_hmsg_baseline_sizes() -> None:
    block = b"NATS/1.0\r\nA: b\r\n\r\n"
    assert len(block) == 18  # not 16 as the TESTPLAN baseline claims
    with pytest.raises(RemoteProtocolError):
        Parser().feed(b"HMSG a 1 r 16 19\r\n" + block + b"abc\r\n")
    (m,) = Parser().feed(b"HMSG a 1 r 18 21\r\n" + block + b"abc\r\n")
    assert isinstance(m, MsgReceived)
    assert m.headers == Headers({"A": "b"}) and m.data == b"abc" and m.reply == "r"


# --------------------------------------------------------------------------- INFO at the connection level


@pytest.mark.parametrize("value", [b"-1", b"0", str(2**63).encode(), b'"1024"', b"1.5", b"true", b"null", b"[]", str(64 * 1024 * 1024 + 1).encode()])
@pytest.mark.parametrize("when", ["handshake", "async"])
def test_bad_max_payload_closes_the_transport(value: bytes, when: str) -> None:
    h = Harness()
    if when == "handshake":
        h.dial()
    else:
        h.connect()
    h.conn.receive_data(b'INFO {"max_payload":' + value + b"}\r\n", h.now)  # must not raise
    events = h.pump()
    closes = [e for e in events if isinstance(e, ev.CloseRequested)]
    assert len(closes) == 1 and isinstance(closes[0].error, RemoteProtocolError)
    assert h.conn.max_payload != -1
    if when == "handshake":
        assert b"CONNECT" not in h.conn.data_to_send()
    h.conn.receive_data(b"PONG\r\n", h.now)  # bytes after the close are ignored
    assert not any(isinstance(e, (ev.Connected, ev.Reconnected)) for e in h.pump())


@pytest.mark.parametrize("value", [1, 1024, 64 * 1024 * 1024])
def test_good_max_payload_is_applied(value: int) -> None:
    h = Harness()
    h.connect(info={"max_payload": value})
    assert h.conn.max_payload == value


def test_connect_urls_pool_updates_and_warnings() -> None:
    h = Harness(servers=("nats://a:4222",))
    h.connect()
    h.info({"connect_urls": ["b:4222", "b:4222", "a:4222", "c:5222", "10.0.0.1:4222", "[::1]:4222"]})
    events = h.pump()
    assert h.conn.servers == [
        "nats://a:4222", "nats://b:4222", "nats://c:5222", "nats://10.0.0.1:4222", "nats://[::1]:4222",
    ]  # fmt: skip
    discovered = [e for e in events if isinstance(e, ev.ServersDiscovered)]
    assert discovered == [
        ev.ServersDiscovered(urls=("nats://b:4222", "nats://c:5222", "nats://10.0.0.1:4222", "nats://[::1]:4222"))
    ]
    assert not [e for e in events if isinstance(e, ev.ServerPoolWarning)], "duplicates are not warnings"
    # empty list: nothing changes
    h.info({"connect_urls": []})
    assert h.pump() == [] and len(h.conn.servers) == 5
    # malformed entries: ignored with ONE warning per INFO naming how many (a huge INFO must not
    # flood the application with events); the good one is still added
    h.info({"connect_urls": ["bad\u0000:4222", "", 7, None, "x y:1", "u:p@evil:4222", "d:99999", "ftp://e:1", "f:4222"]})
    events = h.pump()
    warnings = [e for e in events if isinstance(e, ev.ServerPoolWarning)]
    assert len(warnings) == 1 and "ignored 8 malformed connect_urls" in warnings[0].message
    assert "x y:1" in warnings[0].message and "evil" not in warnings[0].message and "and 3 more" in warnings[0].message
    assert h.conn.servers[-1] == "nats://f:4222" and len(h.conn.servers) == 6
    assert all("\x00" not in s for s in h.conn.servers)
    # not a list
    for value in ("a:4222", {"a": 1}, 5):
        h.info({"connect_urls": value})
        events = h.pump()
        assert [type(e) for e in events] == [ev.ServerPoolWarning]
    assert len(h.conn.servers) == 6
    assert h.conn.is_connected


def test_connect_urls_ten_thousand_entries_are_capped() -> None:
    h = Harness()
    h.connect()
    urls = [f"h{i}:4222" for i in range(10_000)]
    h.info({"connect_urls": urls})
    events = h.pump()
    assert len(h.conn.servers) <= 1024
    assert any(isinstance(e, ev.ServerPoolWarning) and "full" in e.message for e in events)
    assert h.conn.is_connected


def test_connect_urls_ignored_when_asked() -> None:
    h = Harness(ignore_discovered_servers=True)
    h.connect(info={"connect_urls": ["b:4222"]})
    h.info({"connect_urls": ["c:4222", "d:4222"]})
    events = h.pump()
    assert h.conn.servers == ["nats://a:4222"]
    assert not any(isinstance(e, ev.ServersDiscovered) for e in events)


def test_ldm_non_bool_is_a_warning_not_lame_duck() -> None:
    h = Harness()
    h.connect()
    h.info({"ldm": "yes"})
    events = h.pump()
    assert [type(e) for e in events] == [ev.ServerPoolWarning]


def test_info_repeated_before_and_after_connect() -> None:
    h = Harness()
    h.dial()
    h.conn.receive_data(b'INFO {"max_payload":2048}\r\n', h.now)
    first = h.conn.data_to_send()
    assert first.startswith(b"CONNECT ") and first.endswith(b"PING\r\n")
    h.conn.receive_data(b'INFO {"max_payload":4096}\r\n', h.now)
    assert h.conn.data_to_send() == b"", "a second INFO must not send a second CONNECT"
    h.conn.receive_data(b"PONG\r\n", h.now)
    assert any(isinstance(e, ev.Connected) for e in h.pump())
    assert h.conn.max_payload == 4096
    h.info({"max_payload": 1024})
    assert h.conn.max_payload == 1024 and h.conn.data_to_send() == b""


def test_info_split_across_one_byte_reads_at_the_connection() -> None:
    h = Harness()
    h.dial()
    data = b'INFO {"server_id":"S","max_payload":4096}\r\n'
    for i in range(len(data)):
        h.conn.receive_data(data[i : i + 1], h.now)
    assert h.conn.data_to_send().startswith(b"CONNECT ")
    assert h.conn.max_payload == 4096
