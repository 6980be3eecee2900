"""A short run of every fuzz target: all seeds, then a few hundred hypothesis inputs each.

The long runs are external (atheris, see fuzz/README.md); this keeps the targets and their
invariants working in the normal test run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fuzz import fuzz_headers, fuzz_wire
from jscore.errors import RemoteProtocolError
from jscore.protocol import AcksReceived, DirectRepliesReceived, MsgsReceived, Parser

FUZZ_DIR = Path(fuzz_wire.__file__).resolve().parent
TARGETS: dict[str, Callable[[bytes], None]] = {"wire": fuzz_wire.one_input, "headers": fuzz_headers.one_input}
SEEDS = sorted((name, path) for name in TARGETS for path in (FUZZ_DIR / "corpus" / name).iterdir() if path.is_file())
SMOKE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WIRE_FRAGMENTS = [
    b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b"-ERR 'x'\r\n", b"INFO {}\r\n", b'INFO {"max_payload":1024}\r\n',
    b"MSG a 1 3\r\nabc\r\n", b"MSG a 1 r 3\r\nabc\r\n", b"HMSG a 1 12 12\r\nNATS/1.0\r\n\r\n\r\n",
    b"HMSG a 1 r 18 21\r\nNATS/1.0\r\nA: b\r\n\r\nabc\r\n", b"NATS/1.0 503\r\n", b"NATS/1.0 100 Idle Heartbeat\r\n",
    b"MSG ", b"HMSG ", b"INFO ", b"-ERR ", b" ", b"\t", b"\r\n", b"\r", b"\n", b"0", b"1", b"12", b"99999999999",
    b"a", b"a.b", b"_INBOX.x", b"NATS/1.0", b"A: b", b":", b"\x00", b"\xff",
]  # fmt: skip
HEADER_FRAGMENTS = [
    b"NATS/1.0", b" ", b"503", b"100", b"409", b"Idle Heartbeat", b"\r\n", b"\r", b"\n", b"A", b"Nats-Pin-Id",
    b":", b": ", b"v", b"\t", b"\xff\xfe", b"\x00", "é".encode(), "\u2028".encode(), b"0",
]  # fmt: skip


def test_corpora_are_seeded() -> None:
    for name in TARGETS:
        files = [p for p in (FUZZ_DIR / "corpus" / name).iterdir() if p.is_file()]
        assert len(files) >= 20, f"fuzz/corpus/{name} needs its seeds"


@pytest.mark.parametrize(("target", "path"), SEEDS, ids=[f"{t}/{p.name}" for t, p in SEEDS])
def test_seed(target: str, path: Path) -> None:
    TARGETS[target](path.read_bytes())


@pytest.mark.parametrize("path", [p for t, p in SEEDS if t == "wire"], ids=lambda p: p.name)
def test_wire_seed_as_header_input(path: Path) -> None:
    fuzz_headers.one_input(path.read_bytes())


@SMOKE
@given(st.binary(max_size=200))
@example(b"")
@example(b"MSG a 1 3\r\nabc\r\n")
def test_wire_random_bytes(data: bytes) -> None:
    fuzz_wire.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(WIRE_FRAGMENTS) | st.binary(max_size=4), max_size=24).map(b"".join))
def test_wire_protocol_fragments(data: bytes) -> None:
    fuzz_wire.one_input(data)


@SMOKE
@given(st.binary(max_size=200))
@example(b"")
@example(b"NATS/1.0\r\nA: b\r\n\r\n")
def test_headers_random_bytes(data: bytes) -> None:
    fuzz_headers.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(HEADER_FRAGMENTS) | st.binary(max_size=3), max_size=20).map(b"".join))
def test_headers_fragments(data: bytes) -> None:
    fuzz_headers.one_input(data)


# The harness must be able to fail: a broken parser is caught.


class _SplitSensitiveParser:
    """Emits a different event when fed in pieces: the invariant must catch it."""

    def __init__(self, max_payload: int = 0, lane: object = None) -> None:
        self.poisoned = False
        self.buffered = 0
        self.calls = 0

    def feed(self, data: bytes) -> list[object]:
        self.calls += 1
        return [self.calls] if data else []


class _LeakyParser(_SplitSensitiveParser):
    def feed(self, data: bytes) -> list[object]:
        raise ValueError("not a RemoteProtocolError")


class _UnboundedParser(_SplitSensitiveParser):
    def feed(self, data: bytes) -> list[object]:
        self.buffered += len(data) * 10_000_000
        return []


class _NotPoisonedParser(_SplitSensitiveParser):
    def feed(self, data: bytes) -> list[object]:
        if data.startswith(b"X"):
            raise RemoteProtocolError("bad")
        return []


@pytest.mark.parametrize(
    ("fake", "error"),
    [
        (_SplitSensitiveParser, AssertionError),
        (_LeakyParser, ValueError),
        (_UnboundedParser, AssertionError),
        (_NotPoisonedParser, AssertionError),
    ],
)
def test_wire_harness_catches_broken_parsers(monkeypatch: pytest.MonkeyPatch, fake: type, error: type) -> None:
    monkeypatch.setattr(fuzz_wire, "Parser", fake)
    with pytest.raises(error):
        fuzz_wire.one_input(b"XPING\r\nPONG\r\n")


class _LossyLaneParser(Parser):
    """Reads the ack lane's runs but gets the last PubAck's sequence wrong (by one: the sizes
    still add up, so only the comparison with the plain parser can see it)."""

    def feed(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        for e in super().feed(data):
            if isinstance(e, AcksReceived):
                token, stream, seq, duplicate = e.acks[-1]
                e = AcksReceived(e.sid, [*e.acks[:-1], (token, stream, seq + 1, duplicate)], e.size)
            out.append(e)
        return out


def test_wire_harness_catches_a_lossy_ack_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_wire, "Parser", _LossyLaneParser)
    frames = b"".join(
        b"MSG _INBOX.AbCdEfGhIjKlMnOpQrStUv.%d 1 %d\r\n%s\r\n" % (i, len(body), body)
        for i, body in ((1, b'{"stream":"S","seq":1}'), (2, b'{"stream":"S","seq":2}'))
    )
    with pytest.raises(AssertionError, match="plain="):  # (the comparison with the plain parser)
        fuzz_wire.one_input(frames)


class _LossyRunsParser(Parser):
    """Reads delivery runs but drops a run's last message when it has more than one (its size
    still counting it)."""

    def feed(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        for e in super().feed(data):
            if isinstance(e, MsgsReceived) and len(e.msgs) > 1:
                e = MsgsReceived(e.sid, e.msgs[:-1], e.size - e.msgs[-1].size)
            out.append(e)
        return out


class _UnrunParser(Parser):
    """Delivers a run's messages one by one, as the plain parser does."""

    def feed(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        for e in super().feed(data):
            out.extend(e.msgs if isinstance(e, MsgsReceived) else [e])
        return out


_RUN = b"MSG s.a 3 $JS.ACK.S.c.1.1.1.1.0 2\r\nm1\r\nHMSG s.b 3 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nm2\r\n"


@pytest.mark.parametrize("fake,match", [(_LossyRunsParser, "plain="), (_UnrunParser, "came alone")])
def test_wire_harness_catches_broken_delivery_runs(monkeypatch: pytest.MonkeyPatch, fake: type, match: str) -> None:
    fuzz_wire.one_input(_RUN)  # (the real parser passes)
    monkeypatch.setattr(fuzz_wire, "Parser", fake)
    with pytest.raises(AssertionError, match=match):
        fuzz_wire.one_input(_RUN)


class _LossyDirectParser(Parser):
    """Reads the direct lane's runs but gets the first reply's pending count wrong by one."""

    def feed(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        for e in super().feed(data):
            if isinstance(e, DirectRepliesReceived):
                stream, subject, seq, stamp, pending, last, up_to, own, payload = e.replies[0]
                first = (stream, subject, seq, stamp, pending + 1, last, up_to, own, payload)
                e = DirectRepliesReceived(e.sid, [first, *e.replies[1:]], e.size)
            out.append(e)
        return out


class _MiscountingDirectParser(Parser):
    """Reads the direct lane's runs but counts a byte too many for each."""

    def feed(self, data: bytes) -> list[Any]:
        return [DirectRepliesReceived(e.sid, e.replies, e.size + 1) if isinstance(e, DirectRepliesReceived) else e
                for e in super().feed(data)]


@pytest.mark.parametrize("fake", [_LossyDirectParser, _MiscountingDirectParser])
def test_wire_harness_catches_a_broken_direct_lane(monkeypatch: pytest.MonkeyPatch, fake: type) -> None:
    seed = (Path(fuzz_wire.__file__).parent / "corpus" / "wire" / "direct_lane").read_bytes()
    fuzz_wire.one_input(seed)  # (the real parser passes, and the seed takes the lane)
    assert any(isinstance(e, DirectRepliesReceived) for e in fuzz_wire.check_lane(seed).events)
    monkeypatch.setattr(fuzz_wire, "Parser", fake)
    with pytest.raises(AssertionError, match="plain="):
        fuzz_wire.one_input(seed)


def test_headers_harness_catches_a_lossy_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fuzz_headers.encode_headers

    def lossy(headers: object) -> bytes:
        return real([(k, v.upper()) for k, v in headers.items()])  # type: ignore[attr-defined]

    monkeypatch.setattr(fuzz_headers, "encode_headers", lossy)
    with pytest.raises(AssertionError):
        fuzz_headers.one_input(b"NATS/1.0\r\nA: b\r\n\r\n")


def test_headers_harness_lets_unexpected_exceptions_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(block: bytes) -> object:
        raise KeyError("not a RemoteProtocolError")

    monkeypatch.setattr(fuzz_headers, "parse_header_block", boom)
    with pytest.raises(KeyError):
        fuzz_headers.one_input(b"NATS/1.0\r\n\r\n")


def test_long_inputs_are_split_around_every_line_end() -> None:
    data = b'INFO {"x":"' + b"a" * 300 + b'"}\r\nPING\r\n'
    assert len(data) > fuzz_wire.BYTEWISE_MAX
    cuts = fuzz_wire.bytewise_cuts(data)
    cr = data.index(b"\r")
    assert {cr, cr + 1, cr + 2} <= set(cuts)  # before the CR, between CR and LF, after the LF
    assert set(range(1, fuzz_wire.WINDOW)) <= set(cuts)
    assert len(cuts) < 3 * fuzz_wire.WINDOW + 4 * fuzz_wire.MAX_DELIMITER_CUTS
    assert fuzz_wire.bytewise_cuts(b"PING\r\n") == [1, 2, 3, 4, 5]


class _CrSplitSensitiveParser:
    """The real parser, but a chunk ending in CR adds a PONG: only a CR/LF split shows it."""

    def __init__(self, max_payload: int = 0, lane: Any = None) -> None:
        self._real = Parser(max_payload, lane)

    poisoned = property(lambda self: self._real.poisoned)
    buffered = property(lambda self: self._real.buffered)

    def feed(self, data: bytes) -> list[object]:
        from jscore.protocol import PongReceived

        events: list[object] = list(self._real.feed(data))
        return events + [PongReceived()] if data.endswith(b"\r") else events


def test_wire_harness_catches_a_cr_lf_split_bug_past_the_byte_by_byte_window(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b'INFO {"x":"' + b"a" * 300 + b'"}\r\nPING\r\n'
    fuzz_wire.check_wire(data)
    monkeypatch.setattr(fuzz_wire, "Parser", _CrSplitSensitiveParser)
    with pytest.raises(AssertionError):
        fuzz_wire.check_wire(data)
