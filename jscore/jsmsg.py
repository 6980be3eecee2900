"""JetStream messages: metadata from the ack subject, acknowledgement bodies, the ack guard.

A message delivered by a JetStream consumer carries everything the client needs to know about it
in its reply subject, which is also where acknowledgements go. The server writes it in one of
two forms (nats-server ``consumer.go`` builds the v1 form as ``$JS.ACK.<stream>.<consumer>``
followed by five ``%d`` fields; nats.go ``GetMetadataFields`` accepts both)::

    v1 (9 tokens)       $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts_ns>.<pending>
    v2 (11-12 tokens)   $JS.ACK.<domain>.<account_hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts_ns>.<pending>[.<token>]

In v2 the domain ``_`` means "no domain". :func:`parse_ack_subject` is strict where the reference
client is lenient (nats.go turns a bad number into 0): a wrong prefix, a token count other than
9, 11 or 12, an empty token, or a number that is not plain ASCII digits (no sign, no leading
zero, at most 2**64-1) raises :class:`~jscore.errors.NotJetStreamMessageError`. A silently
zeroed sequence would corrupt the ordered consumer's cursor; a loud error cannot.

Acknowledgements are message bodies published to that reply subject (REFERENCE.md, "Acks"). A
message takes at most one *terminal* acknowledgement (``+ACK``, ``-NAK``, ``+TERM``, ``+NXT``);
``+WPI`` (work in progress) may repeat, but only before the terminal one. The guard is a small
int per message so that the transport's ``Msg`` stays cheap (see :func:`ack_transition`).

This module imports nothing from :mod:`jscore.models` (which re-exports :class:`MsgMetadata` and
:class:`SequencePair`), so there is no import cycle.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Final

import msgspec

from .errors import InvalidOptionError, MsgAlreadyAckedError, NotJetStreamMessageError
from .machine import ConnectionClosed, Stop
from .times import from_unix_ns, unix_ns

__all__ = [
    "SequencePair",
    "MsgMetadata",
    "parse_ack_subject",
    "ack_cursor",
    "format_ack_subject",
    "ACK",
    "NAK",
    "WPI",
    "TERM",
    "NXT",
    "nak_body",
    "term_body",
    "next_body",
    "is_terminal_ack",
    "ACK_NONE",
    "ACK_IN_PROGRESS",
    "ACK_DONE",
    "ack_transition",
    "AckTracker",
]

_MAX_U64: Final = 2**64 - 1
_MAX_U64_DIGITS: Final = 20
_NS_PER_SECOND: Final = 1_000_000_000
_ACK_PREFIX: Final = "$JS.ACK."
# The five numbers as the server's %d writes them: ASCII digits, no sign, no leading zero, at most
# 20 digits (the u64 bound is checked after int()). One regex match is faster than five checks.
_NUMBERS: Final = re.compile(r"(?:0|[1-9][0-9]{0,19})(?:\.(?:0|[1-9][0-9]{0,19})){4}", re.ASCII)
# The v1 form whole (every subject of a consumer without a domain or account hash): one match
# instead of a split, a join and the numbers' match. Accepts exactly what the general path does.
_NUMBER_GROUP: Final = r"(0|[1-9][0-9]{0,19})"
_V1: Final = re.compile(r"\$JS\.ACK\.([^.]+)\.([^.]+)\." + r"\.".join([_NUMBER_GROUP] * 5), re.ASCII)
_NUMBER_NAMES: Final = ("delivered count", "stream sequence", "consumer sequence", "timestamp", "pending count")


# =========================================================================== metadata


class SequencePair(msgspec.Struct, frozen=True, gc=False):
    """The stream sequence of a message and the consumer sequence of this delivery of it
    (the consumer sequence counts deliveries, redeliveries included)."""

    stream: int
    consumer: int


class MsgMetadata(msgspec.Struct, frozen=True, gc=False):
    """What the ack subject says about a delivered message.

    ``timestamp`` is when the message was stored, an aware UTC datetime: a
    :class:`~jscore.times.NatsTime` that keeps the server's nanoseconds (its datetime value is
    truncated to microseconds, never later than the stamp, so ``start_time=`` with it finds
    the message again); ``timestamp_ns`` is the same time in nanoseconds since the Unix epoch. ``domain`` is None without a JetStream domain (v1
    subjects, or ``_`` in v2). ``account_hash`` and ``token`` are set only by v2 subjects; they
    are kept so that :func:`format_ack_subject` rebuilds the subject exactly.

    Constructed by hand, ``timestamp_ns`` may be left out: it is then derived from
    ``timestamp``.
    """

    stream: str
    consumer: str
    domain: str | None
    num_delivered: int
    num_pending: int
    timestamp: datetime
    sequence: SequencePair
    timestamp_ns: int = -1
    account_hash: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if self.timestamp_ns < 0:
            msgspec.structs.force_setattr(self, "timestamp_ns", unix_ns(self.timestamp))


def _bad(reply: str, why: str) -> NotJetStreamMessageError:
    return NotJetStreamMessageError(f"not a JetStream ack subject ({why}): {reply[:160]!r}")


def _num(token: str, what: str, reply: str) -> int:
    # str.isdigit alone accepts '²' and Arabic-Indic digits, int() accepts '+1', ' 1', '1_0':
    # only plain ASCII digits, written as the server's %d writes them, are a number here.
    if token.isdigit() and token.isascii() and len(token) <= _MAX_U64_DIGITS and (token[0] != "0" or len(token) == 1):
        n = int(token)
        if n <= _MAX_U64:
            return n
    raise _bad(reply, f"{what} {token[:24]!r} is not an unsigned 64-bit decimal")


def parse_ack_subject(reply: str) -> MsgMetadata:
    """Parse a JetStream ack (reply) subject, v1 or v2, into :class:`MsgMetadata`.

    Raises :class:`~jscore.errors.NotJetStreamMessageError` (a ``ValueError``) for anything
    that is not exactly one of the two server formats. Called once per message whose
    ``metadata`` is read (and for every delivery of an ordered consumer): a v1 subject takes one
    regex match and five ``int`` conversions (about 2 µs on CPython 3.11, a quarter of it
    building the datetime); the rest go token by token (:func:`_parse_split`).
    """
    m = _V1.fullmatch(reply)
    if m is not None:
        stream, consumer, d, s, c, t, p = m.groups()
        ts_ns = int(t)
        delivered, sseq, cseq, pending = int(d), int(s), int(c), int(p)
        if delivered <= _MAX_U64 and sseq <= _MAX_U64 and cseq <= _MAX_U64 and ts_ns <= _MAX_U64 and pending <= _MAX_U64:
            return MsgMetadata(
                stream, consumer, None, delivered, pending, from_unix_ns(ts_ns), SequencePair(sseq, cseq), ts_ns
            )
        # (a number above 2**64-1: the general path names it)
    return _parse_split(reply)


def ack_cursor(reply: str) -> tuple[str, int, int, int] | None:
    """``(consumer, stream sequence, consumer sequence, timestamp in ns)`` of a v1 ack subject,
    the values :func:`parse_ack_subject` gives for it, without building :class:`MsgMetadata`
    (an ordered consumer's check of a run of deliveries, which needs no datetime). None for
    anything else, valid or not (a v2 subject, a number above 2**64-1): the caller then uses
    :func:`parse_ack_subject`, which reads it or names what is wrong."""
    m = _V1.fullmatch(reply)
    if m is None:
        return None
    _, consumer, d, s, c, t, p = m.groups()
    sseq, cseq, ts_ns = int(s), int(c), int(t)
    if sseq <= _MAX_U64 and cseq <= _MAX_U64 and ts_ns <= _MAX_U64 and int(d) <= _MAX_U64 and int(p) <= _MAX_U64:
        return consumer, sseq, cseq, ts_ns
    return None


def _parse_split(reply: str) -> MsgMetadata:
    """:func:`parse_ack_subject` token by token: both forms, and the error for a bad subject."""
    if not reply.startswith(_ACK_PREFIX):
        raise _bad(reply, "no $JS.ACK. prefix")
    tokens = reply.split(".")
    n = len(tokens)
    if n == 9:
        domain: str | None = None
        account_hash: str | None = None
        token: str | None = None
        i = 2
    elif n == 11 or n == 12:
        domain = tokens[2]
        account_hash = tokens[3]
        token = tokens[11] if n == 12 else None
        if not domain or not account_hash or token == "":
            raise _bad(reply, "empty token")
        if domain == "_":
            domain = None
        i = 4
    else:
        raise _bad(reply, f"{n} tokens, expected 9, 11 or 12")
    stream = tokens[i]
    consumer = tokens[i + 1]
    if not stream or not consumer:
        raise _bad(reply, "empty stream or consumer name")
    numbers = tokens[i + 2 : i + 7]
    if _NUMBERS.fullmatch(".".join(numbers)) is None:
        for what, tok in zip(_NUMBER_NAMES, numbers):
            _num(tok, what, reply)  # raises, naming the culprit
        raise _bad(reply, "malformed numbers")  # not reached: _num accepts a subset of _NUMBERS
    delivered, sseq, cseq, ts_ns, pending = map(int, numbers)
    if delivered > _MAX_U64 or sseq > _MAX_U64 or cseq > _MAX_U64 or ts_ns > _MAX_U64 or pending > _MAX_U64:
        for what, tok in zip(_NUMBER_NAMES, numbers):
            _num(tok, what, reply)  # raises for the one above 2**64-1
    return MsgMetadata(
        stream,
        consumer,
        domain,
        delivered,
        pending,
        from_unix_ns(ts_ns),  # exact: truncated to microseconds plus the nanoseconds
        SequencePair(sseq, cseq),
        ts_ns,
        account_hash,
        token,
    )


def format_ack_subject(meta: MsgMetadata) -> str:
    """The ack subject ``meta`` was parsed from (the inverse of :func:`parse_ack_subject`).

    v2 when ``account_hash`` is set (domain None written as ``_``), else v1. Test servers use it
    to build deliveries; the fuzz target uses it to check that parsing loses nothing.
    """
    fields = (
        f"{meta.stream}.{meta.consumer}.{meta.num_delivered}.{meta.sequence.stream}."
        f"{meta.sequence.consumer}.{meta.timestamp_ns}.{meta.num_pending}"
    )
    if meta.account_hash is None:
        return _ACK_PREFIX + fields
    subject = f"{_ACK_PREFIX}{meta.domain or '_'}.{meta.account_hash}.{fields}"
    return subject if meta.token is None else f"{subject}.{meta.token}"


# =========================================================================== ack bodies

ACK: Final = b"+ACK"
"""Processed: do not redeliver."""
NAK: Final = b"-NAK"
"""Not processed: redeliver (at once, or after the consumer's backoff)."""
WPI: Final = b"+WPI"
"""Work in progress: restart the ack-wait timer. Not terminal; may repeat."""
TERM: Final = b"+TERM"
"""Never redeliver, whatever max_deliver says."""
NXT: Final = b"+NXT"
"""Acknowledge and ask for the next message(s) on the same reply (pull consumers only)."""


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOptionError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise InvalidOptionError(f"{name} must be finite, got {value!r}")
    return float(value)


def _ns(seconds: float) -> int:
    return int(round(seconds * _NS_PER_SECOND))


def nak_body(delay: float | None = None) -> bytes:
    """``-NAK``, or ``-NAK {"delay": <ns>}`` to ask for redelivery after ``delay`` seconds.

    A delay of 0 (or None) sends the plain ``-NAK``: the server treats both alike and older
    servers understand only the plain form (the reference client does the same). A negative,
    infinite or non-numeric delay raises :class:`~jscore.errors.InvalidOptionError`.
    """
    if delay is None:
        return NAK
    seconds = _seconds("nak delay", delay)
    if seconds < 0:
        raise InvalidOptionError(f"nak delay must be >= 0 seconds, got {delay!r}")
    ns = _ns(seconds)
    if ns == 0:
        return NAK
    return b'-NAK {"delay": %d}' % ns


def term_body(reason: str | None = None) -> bytes:
    """``+TERM``, or ``+TERM <reason>`` (the reason shows in the server's terminated advisory,
    nats-server 2.10.4+). CR and LF are refused, never rewritten."""
    if reason is None or reason == "":
        return TERM
    if not isinstance(reason, str):
        raise InvalidOptionError(f"term reason must be a str, got {type(reason).__name__}")
    if "\r" in reason or "\n" in reason:
        raise InvalidOptionError(f"term reason {reason[:64]!r} must not contain CR or LF")
    try:
        return b"+TERM " + reason.encode()
    except UnicodeEncodeError:
        raise InvalidOptionError("term reason is not encodable as UTF-8 (lone surrogate)") from None


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidOptionError(f"{name} must be >= 1, got {value}")
    return value


def next_body(
    batch: int | None = None,
    *,
    expires: float | None = None,
    max_bytes: int | None = None,
    no_wait: bool = False,
    heartbeat: float | None = None,
) -> bytes:
    """The body of an ack-and-pull (``+NXT``): ``+NXT``, ``+NXT <batch>`` or ``+NXT {json}``.

    The server reads what follows ``+NXT`` like a pull request (nats-server
    ``nextReqFromMsg``): nothing means one message, a bare number a batch size, a JSON object
    the full request. The JSON form is used only when more than a batch is asked; its fields
    follow the pull request's wire rules (zero values omitted, durations in integer
    nanoseconds, ``batch`` always present because the server refuses a batch of 0) and the
    server's own check that ``2 * idle_heartbeat <= expires``.
    """
    if batch is not None:
        batch = _positive_int("batch", batch)
    if expires is None and max_bytes is None and not no_wait and heartbeat is None:
        return NXT if batch is None else b"+NXT %d" % batch
    request: dict[str, int | bool] = {}
    exp = 0.0
    if expires is not None:
        exp = _seconds("expires", expires)
        if exp <= 0:
            raise InvalidOptionError(f"expires must be > 0 seconds, got {expires!r}")
        request["expires"] = _ns(exp)
    request["batch"] = 1 if batch is None else batch
    if max_bytes is not None:
        request["max_bytes"] = _positive_int("max_bytes", max_bytes)
    if no_wait:
        request["no_wait"] = True
    if heartbeat is not None:
        hb = _seconds("heartbeat", heartbeat)
        if hb <= 0:
            raise InvalidOptionError(f"heartbeat must be > 0 seconds, got {heartbeat!r}")
        if expires is None or 2 * hb > exp:
            raise InvalidOptionError("heartbeat needs expires >= 2 * heartbeat (the server refuses it otherwise)")
        request["idle_heartbeat"] = _ns(hb)
    return b"+NXT " + msgspec.json.encode(request)


def is_terminal_ack(body: bytes) -> bool:
    """Whether an ack body ends the message's acknowledgement: everything but ``+WPI``."""
    return not body.startswith(WPI)


# =========================================================================== ack guard

ACK_NONE: Final = 0
"""No acknowledgement sent yet."""
ACK_IN_PROGRESS: Final = 1
"""Only ``+WPI`` sent so far: a terminal ack is still allowed."""
ACK_DONE: Final = 2
"""A terminal ack was sent: any further ack, ``+WPI`` included, is an error."""


def ack_transition(state: int, terminal: bool) -> int:
    """The ack state after sending an ack from ``state``, or :class:`MsgAlreadyAckedError`.

    Compute it *before* sending and store it only *after* the send succeeded: an ack that could
    not be written (connection closed, timeout of ``ack_sync``) leaves the message
    acknowledgeable, so the user can retry. Two comparisons; the transport keeps the int on
    its ``Msg`` under its own lock.
    """
    if state == ACK_DONE:
        raise MsgAlreadyAckedError("a terminal acknowledgement was already sent for this message")
    return ACK_DONE if terminal else ACK_IN_PROGRESS


class AckTracker:
    """The ack state of one message as an object, for callers that prefer one to an int.

    ``prepare(body)`` checks and returns the next state without changing anything;
    ``commit(state)`` records it once the body was sent.
    """

    __slots__ = ("state",)

    def __init__(self, state: int = ACK_NONE) -> None:
        self.state = state

    @property
    def acked(self) -> bool:
        """A terminal acknowledgement was sent."""
        return self.state == ACK_DONE

    @property
    def in_progress(self) -> bool:
        """Only ``+WPI`` was sent so far."""
        return self.state == ACK_IN_PROGRESS

    def prepare(self, body: bytes) -> int:
        """The state after sending ``body``; raises :class:`MsgAlreadyAckedError` if not allowed."""
        return ack_transition(self.state, is_terminal_ack(body))

    def commit(self, state: int) -> None:
        """Record the state returned by :meth:`prepare` once the ack was sent."""
        if state < self.state:  # a +WPI that raced a terminal ack
            raise MsgAlreadyAckedError("a terminal acknowledgement was already sent for this message")
        self.state = state

    def __repr__(self) -> str:
        return f"AckTracker(state={self.state})"


# ============================================================================ auto progress


class HandlerStarted(msgspec.Struct, frozen=True, kw_only=True):
    """Auto progress: a handler began with the message whose ack subject is ``reply``."""

    reply: str


class HandlerFinished(msgspec.Struct, frozen=True, kw_only=True):
    """Auto progress: the handler returned (whatever it did with the message)."""


class ProgressRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Publish ``+WPI`` to ``reply``: the message's handler is still running."""

    reply: str


class ProgressMachine:
    """Auto progress of a consume (a session sub-machine with no inbox): while a handler runs
    longer than ``interval`` seconds, a ``+WPI`` goes to its message's ack subject every
    ``interval`` seconds, so the server does not redeliver it (``interval`` is a fraction of the
    consumer's ack_wait). A ``+WPI`` after the handler acked is ignored by the server."""

    def __init__(self, interval: float) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not (
            math.isfinite(interval) and interval > 0
        ):
            raise InvalidOptionError(f"the progress interval must be > 0 seconds, got {interval!r}")
        self.interval = float(interval)
        self._reply: str | None = None
        self._due: float | None = None
        self._events: list[ProgressRequested] = []
        self.finished = False
        self.sent = 0

    def receive_msg(self, msg: object, now: float) -> None:
        """(no inbox: never called)"""

    def handle(self, command: object, now: float) -> None:
        if isinstance(command, HandlerStarted):
            self._reply = command.reply
            self._due = now + self.interval
        elif isinstance(command, HandlerFinished):
            self._reply = self._due = None
        elif isinstance(command, (Stop, ConnectionClosed)):
            self.finished = True
            self._reply = self._due = None
        # ConnectionLost / ConnectionRestored: the timer goes on (a +WPI while disconnected
        # is buffered and sent on reconnect; the ack subject stays valid)

    def handle_timeout(self, now: float) -> None:
        if self._due is not None and now >= self._due and self._reply is not None:
            self._events.append(ProgressRequested(reply=self._reply))
            self.sent += 1
            self._due = now + self.interval

    def next_deadline(self) -> float | None:
        return None if self.finished else self._due

    def drain_events(self) -> list[ProgressRequested]:
        events, self._events = self._events, []
        return events
