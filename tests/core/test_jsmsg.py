"""jscore.jsmsg: ack-subject metadata (v1, v2), ack bodies byte for byte, the double-ack guard."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jscore import jsmsg, models
from jscore.errors import InvalidOptionError, JetStreamError, MsgAlreadyAckedError, NatsError, NotJetStreamMessageError
from jscore.jsmsg import (
    ACK,
    ACK_DONE,
    ACK_IN_PROGRESS,
    ACK_NONE,
    NAK,
    NXT,
    TERM,
    WPI,
    AckTracker,
    MsgMetadata,
    SequencePair,
    ack_transition,
    format_ack_subject,
    is_terminal_ack,
    nak_body,
    next_body,
    parse_ack_subject,
    term_body,
)

TS = 1_700_000_000_123_456_789
U64 = 2**64 - 1


# ----------------------------------------------------------------------------- metadata


def test_v1() -> None:
    m = parse_ack_subject(f"$JS.ACK.ORDERS.worker.3.42.17.{TS}.5")
    assert m.stream == "ORDERS"
    assert m.consumer == "worker"
    assert m.domain is None
    assert m.num_delivered == 3
    assert m.sequence == SequencePair(stream=42, consumer=17)
    assert m.num_pending == 5
    assert m.timestamp_ns == TS
    assert m.account_hash is None and m.token is None


def test_v2_with_token() -> None:
    m = parse_ack_subject(f"$JS.ACK.hub.ACC123.ORDERS.worker.1.100.99.{TS}.0.Rd7xk")
    assert (m.domain, m.account_hash, m.stream, m.consumer) == ("hub", "ACC123", "ORDERS", "worker")
    assert (m.num_delivered, m.sequence.stream, m.sequence.consumer, m.num_pending) == (1, 100, 99, 0)
    assert m.token == "Rd7xk"


def test_v2_without_token() -> None:
    m = parse_ack_subject(f"$JS.ACK.hub.ACC.S.C.2.3.4.{TS}.6")
    assert m.domain == "hub" and m.token is None
    assert (m.num_delivered, m.sequence, m.num_pending) == (2, SequencePair(3, 4), 6)


def test_v2_underscore_domain_is_none() -> None:
    m = parse_ack_subject("$JS.ACK._.ACC.S.C.1.2.3.4.5.tok")
    assert m.domain is None
    assert m.account_hash == "ACC"
    assert format_ack_subject(m) == "$JS.ACK._.ACC.S.C.1.2.3.4.5.tok"


def test_timestamp_keeps_nanoseconds_and_is_aware_utc() -> None:
    m = parse_ack_subject(f"$JS.ACK.S.C.1.1.1.{TS}.0")
    assert m.timestamp_ns == TS  # exact: not through a float
    assert m.timestamp.tzinfo is not None and m.timestamp.utcoffset() == timedelta(0)
    # truncated to µs (never later than the server's stamp), the nanoseconds kept: the exact
    # time the server needs to find the message again (start_time=m.timestamp)
    assert m.timestamp == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=timezone.utc)
    assert m.timestamp.nanosecond == TS % 1000 and m.timestamp.ns == TS
    # A float conversion would lose the last digits; these two differ by 1 ns.
    a = parse_ack_subject(f"$JS.ACK.S.C.1.1.1.{TS}.0")
    b = parse_ack_subject(f"$JS.ACK.S.C.1.1.1.{TS + 1}.0")
    assert b.timestamp_ns - a.timestamp_ns == 1


def test_extremes() -> None:
    m = parse_ack_subject(f"$JS.ACK.S.C.{U64}.{U64}.{U64}.{U64}.{U64}")
    assert m.sequence == SequencePair(U64, U64) and m.num_pending == U64 and m.timestamp_ns == U64
    assert m.timestamp.year == 2554
    z = parse_ack_subject("$JS.ACK.S.C.0.0.0.0.0")
    assert z.timestamp == datetime(1970, 1, 1, tzinfo=timezone.utc) and z.timestamp_ns == 0


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "$JS.ACK",
        "$JS.ACK.",
        "$JS.ACK.S.C.1.2.3.4",  # 8 tokens
        "$JS.ACK.S.C.1.2.3.4.5.6",  # 10 tokens
        "$JS.ACK.D.H.S.C.1.2.3.4.5.T.X",  # 13 tokens
        "$JS.ACK.S.C.1.2.3.4.5.",  # trailing dot: 10 tokens
        "$JS.ack.S.C.1.2.3.4.5",
        "$js.ACK.S.C.1.2.3.4.5",
        "JS.ACK.S.C.1.2.3.4.5",
        "$JS.API.S.C.1.2.3.4.5",
        "_INBOX.abc.def",
        " $JS.ACK.S.C.1.2.3.4.5",
        "$JS.ACK..C.1.2.3.4.5",  # empty stream
        "$JS.ACK.S..1.2.3.4.5",  # empty consumer
        "$JS.ACK..H.S.C.1.2.3.4.5",  # empty domain
        "$JS.ACK.D..S.C.1.2.3.4.5",  # empty account hash
        "$JS.ACK.D.H.S.C.1.2.3.4.5.",  # empty token
        "$JS.ACK.S.C..2.3.4.5",  # empty number
        "$JS.ACK.S.C.1.2.3.4.x",
        "$JS.ACK.S.C.-1.2.3.4.5",
        "$JS.ACK.S.C.+1.2.3.4.5",
        "$JS.ACK.S.C. 1.2.3.4.5",
        "$JS.ACK.S.C.1_0.2.3.4.5",
        "$JS.ACK.S.C.01.2.3.4.5",  # leading zero: the server's %d never writes one
        "$JS.ACK.S.C.1.2.3.4.²",  # a unicode digit
        "$JS.ACK.S.C.1.2.3.4.٣",  # Arabic-Indic three
        "$JS.ACK.S.C.1.2.3.1e9.5",
        f"$JS.ACK.S.C.1.2.3.4.{U64 + 1}",
        "$JS.ACK.S.C.1.2.3.4." + "9" * 40,
    ],
)
def test_malformed(subject: str) -> None:
    with pytest.raises(NotJetStreamMessageError):
        parse_ack_subject(subject)


def test_error_type() -> None:
    assert issubclass(NotJetStreamMessageError, JetStreamError)
    assert issubclass(NotJetStreamMessageError, ValueError)
    assert issubclass(NotJetStreamMessageError, NatsError)
    with pytest.raises(ValueError, match="not a JetStream ack subject"):
        parse_ack_subject("foo")


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.ACK.S.C.1.2.3.4.5",
        f"$JS.ACK.ORDERS.c_1.7.{U64}.8.{TS}.0",
        "$JS.ACK.dom.hash.S.C.1.2.3.4.5",
        "$JS.ACK._.hash.S.C.1.2.3.4.5.tok",
        "$JS.ACK.dom.hash.S.C.0.0.0.0.0.tok",
    ],
)
def test_round_trip(subject: str) -> None:
    assert format_ack_subject(parse_ack_subject(subject)) == subject


_tok = st.text(alphabet="abcXYZ019-_", min_size=1, max_size=8)
_n = st.integers(min_value=0, max_value=U64)


@given(_tok, _tok, _n, _n, _n, _n, _n, st.none() | st.tuples(_tok, _tok, st.none() | _tok))
def test_round_trip_property(
    stream: str, consumer: str, d: int, s: int, c: int, ts: int, p: int, v2: tuple[str, str, str | None] | None
) -> None:
    fields = f"{stream}.{consumer}.{d}.{s}.{c}.{ts}.{p}"
    if v2 is None:
        subject = "$JS.ACK." + fields
    else:
        dom, acc, tok = v2
        subject = f"$JS.ACK.{dom}.{acc}.{fields}" + (f".{tok}" if tok else "")
    m = parse_ack_subject(subject)
    assert (m.num_delivered, m.sequence.stream, m.sequence.consumer, m.timestamp_ns, m.num_pending) == (d, s, c, ts, p)
    assert format_ack_subject(m) == subject


def _outcome(parse: object, subject: str) -> object:
    try:
        return parse(subject)  # type: ignore[operator]
    except NotJetStreamMessageError as exc:
        return ("error", str(exc))


_ack_chars = st.sampled_from(list("$JSACK.0123456789-_ab\u00b2\u0661+ \t")) | st.characters()


@given(
    st.one_of(
        st.text(_ack_chars, max_size=60),
        st.lists(st.text(_ack_chars, max_size=22), min_size=7, max_size=8).map(lambda t: "$JS.ACK." + ".".join(t)),
        st.lists(st.sampled_from(["0", "1", "01", "18446744073709551615", "18446744073709551616", "99999999999999999999",
                                  "123456789012345678901", "", "x", "1.2"]), min_size=5, max_size=5)
        .map(lambda t: "$JS.ACK.S.C." + ".".join(t)),
    )
)
def test_the_one_match_of_the_v1_form_agrees_with_the_general_parse(subject: str) -> None:
    """parse_ack_subject reads a v1 subject with one match; whatever it gets, the token-by-token
    parse (both forms, and the errors) gives the same metadata or the same error."""
    assert _outcome(parse_ack_subject, subject) == _outcome(jsmsg._parse_split, subject)


def test_metadata_struct() -> None:
    ts = datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    m = MsgMetadata("S", "C", None, 1, 0, ts, sequence=SequencePair(stream=5, consumer=6))
    assert m.timestamp_ns == (ts - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1) * 1000
    with pytest.raises(AttributeError):
        m.stream = "x"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(m)) == m
    assert msgspec.structs.replace(m, num_pending=3).num_pending == 3
    # API.md: models are importable from jscore.models
    assert models.MsgMetadata is MsgMetadata and models.SequencePair is SequencePair
    assert "MsgMetadata" in models.__all__ and "SequencePair" in models.__all__


# ----------------------------------------------------------------------------- ack bodies


def test_ack_constants() -> None:
    assert (ACK, NAK, WPI, TERM, NXT) == (b"+ACK", b"-NAK", b"+WPI", b"+TERM", b"+NXT")


@pytest.mark.parametrize(
    ("delay", "body"),
    [
        (None, b"-NAK"),
        (0, b"-NAK"),
        (0.0, b"-NAK"),
        (1, b'-NAK {"delay": 1000000000}'),
        (1.5, b'-NAK {"delay": 1500000000}'),
        (0.000000001, b'-NAK {"delay": 1}'),
        (30.25, b'-NAK {"delay": 30250000000}'),
    ],
)
def test_nak_body(delay: float | None, body: bytes) -> None:
    assert nak_body(delay) == body


@pytest.mark.parametrize("delay", [-1, -0.001, float("nan"), float("inf"), "1", True])
def test_nak_body_invalid(delay: object) -> None:
    with pytest.raises(InvalidOptionError):
        nak_body(delay)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reason", "body"),
    [(None, b"+TERM"), ("", b"+TERM"), ("bad payload", b"+TERM bad payload"), ("é", "+TERM é".encode())],
)
def test_term_body(reason: str | None, body: bytes) -> None:
    assert term_body(reason) == body


@pytest.mark.parametrize("reason", ["a\r\nPUB x 1", "a\nb", "a\rb", "\ud800", 5])
def test_term_body_invalid(reason: object) -> None:
    with pytest.raises(InvalidOptionError):
        term_body(reason)  # type: ignore[arg-type]


def test_next_body() -> None:
    assert next_body() == b"+NXT"
    assert next_body(1) == b"+NXT 1"
    assert next_body(10) == b"+NXT 10"
    assert next_body(5, expires=30) == b'+NXT {"expires":30000000000,"batch":5}'
    assert next_body(expires=1.5) == b'+NXT {"expires":1500000000,"batch":1}'
    assert next_body(2, no_wait=True) == b'+NXT {"batch":2,"no_wait":true}'
    assert next_body(3, max_bytes=1024) == b'+NXT {"batch":3,"max_bytes":1024}'
    assert (
        next_body(4, expires=10, heartbeat=5, max_bytes=7)
        == b'+NXT {"expires":10000000000,"batch":4,"max_bytes":7,"idle_heartbeat":5000000000}'
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch": 0},
        {"batch": -1},
        {"batch": True},
        {"batch": 1.0},
        {"expires": 0},
        {"expires": -1},
        {"expires": float("nan")},
        {"max_bytes": 0},
        {"heartbeat": 1},  # needs expires
        {"heartbeat": 6, "expires": 10},  # 2 * heartbeat > expires
        {"heartbeat": 0, "expires": 10},
    ],
)
def test_next_body_invalid(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        next_body(**kwargs)  # type: ignore[arg-type]


def test_terminal_kinds() -> None:
    for body in (ACK, NAK, nak_body(2), TERM, term_body("x"), NXT, next_body(3), next_body(2, expires=5)):
        assert is_terminal_ack(body), body
    assert not is_terminal_ack(WPI)


# ----------------------------------------------------------------------------- the guard


def test_transition_table() -> None:
    assert ack_transition(ACK_NONE, terminal=False) == ACK_IN_PROGRESS
    assert ack_transition(ACK_IN_PROGRESS, terminal=False) == ACK_IN_PROGRESS  # WPI repeats
    assert ack_transition(ACK_NONE, terminal=True) == ACK_DONE
    assert ack_transition(ACK_IN_PROGRESS, terminal=True) == ACK_DONE  # WPI then ACK
    for terminal in (True, False):
        with pytest.raises(MsgAlreadyAckedError):
            ack_transition(ACK_DONE, terminal)


@pytest.mark.parametrize("first", [ACK, NAK, nak_body(1), TERM, term_body("r"), NXT, next_body(5)])
@pytest.mark.parametrize("second", [ACK, NAK, TERM, NXT, WPI])
def test_second_ack_is_refused(first: bytes, second: bytes) -> None:
    t = AckTracker()
    t.commit(t.prepare(first))
    assert t.acked
    with pytest.raises(MsgAlreadyAckedError):
        t.prepare(second)


def test_wpi_repeats_then_terminal() -> None:
    t = AckTracker()
    for _ in range(3):
        t.commit(t.prepare(WPI))
        assert t.in_progress and not t.acked
    t.commit(t.prepare(ACK))
    assert t.acked and not t.in_progress
    with pytest.raises(MsgAlreadyAckedError):
        t.prepare(WPI)


def test_failed_send_leaves_the_message_ackable() -> None:
    # prepare() does not change anything: if sending fails, the user may ack again.
    t = AckTracker()
    t.prepare(ACK)
    assert t.state == ACK_NONE
    t.commit(t.prepare(ACK))
    assert t.state == ACK_DONE


def test_racing_wpi_after_terminal_is_refused() -> None:
    t = AckTracker()
    wpi = t.prepare(WPI)  # prepared before the terminal ack was committed
    t.commit(t.prepare(ACK))
    with pytest.raises(MsgAlreadyAckedError):
        t.commit(wpi)
    assert repr(t) == "AckTracker(state=2)"


def test_module_exports() -> None:
    for name in jsmsg.__all__:
        assert hasattr(jsmsg, name), name
