"""The ordered consumer: its cursor, its consumer configurations and its reset logic (sans-IO).

An ordered consumer delivers a stream's messages exactly once and in order, without any acks,
by owning a chain of throw-away server consumers (REFERENCE.md, "Ordered consumer"; nats.go
``jetstream/ordered.go``). Each one is ephemeral, ``ack_policy`` none, one replica, memory
storage, ``inactive_threshold`` 5 min, and named ``<prefix>_<serial>``. The client tracks the
consumer sequence of every delivery; when anything breaks the chain it *resets*: it forgets the
current consumer and creates the next serial with ``deliver_policy`` by_start_sequence at the last
delivered stream sequence + 1, so nothing is skipped and nothing is delivered twice.

What breaks the chain (:class:`ResetReason`): a consumer-sequence gap (a lost or duplicated
delivery), missed heartbeats, ``409 Consumer Deleted``, a 503 no-responders answer to a pull,
a reconnect, and a fetch abandoned by the client before the server ended it.

This module decides; the transport acts. :class:`OrderedConsumerState` says which configuration to
create, whether a delivery is accepted, stale (from an older serial: drop it silently) or a gap
(reset), and when the next creation attempt is due. Time is passed in (``now``, monotonic
seconds); there are no timers of its own beyond :meth:`~OrderedConsumerState.next_deadline`.

Decisions beyond the reference client (written down in its docstrings and in docs/):

* The user's deliver policy holds until the cursor is known, not only for serial 1: nats.go
  switches to by_start_sequence 1 after a reset that happened before the first message, which
  replays the whole stream for ``deliver_policy=new``. The cursor becomes known with the first
  message, or earlier from the ``delivered.stream_seq`` of the create response (see
  :meth:`~OrderedConsumerState.created`), so a reset before the first message loses nothing either.
* The first creation after a reset is immediate (a gap should heal at once); only failures and
  flapping consumers back off: 1 s, doubling, capped at 10 s.
* Bounded: ``max_reset_attempts`` consecutive unsuccessful attempts (failed creates, and
  consumers that died within :data:`FLAP_WINDOW` without delivering anything) end the consumer
  with :class:`~jscore.errors.OrderedConsumerResetError`. A stream that is gone ends it at once
  with :class:`~jscore.errors.StreamNotFoundError`: no reset storm against a deleted stream.
* A fetch reuses the current server consumer while the cursor is contiguous (nats.go creates a
  new consumer for every fetch): :attr:`~OrderedConsumerState.needs_new_consumer` is False while
  the consumer is active, and :meth:`~OrderedConsumerState.fetch_ended` resets only when a fetch
  was abandoned by the client (messages might still be on their way to the dead inbox).
"""

from __future__ import annotations

import builtins
import enum
from datetime import datetime
from collections.abc import Sequence
from typing import Final, Protocol

import msgspec

from .errors import (
    ConnectionLostError,
    ConsumerNotFoundError,
    InsufficientResourcesError,
    InvalidOptionError,
    JetStreamNotEnabledError,
    JetStreamUnavailableError,
    LocalProtocolError,
    MaximumConsumersLimitError,
    NoRespondersError,
    OrderedConsumerResetError,
    StreamNotFoundError,
)
from .jsmsg import MsgMetadata
from .models import AckPolicy, ConsumerConfig, DeliverPolicy


class ChoiceSource(Protocol):
    """What is needed of an injected generator (a ``random.Random``)."""

    def choice(self, seq: Sequence[str]) -> str: ...

__all__ = [
    "ResetReason",
    "OrderedState",
    "Delivery",
    "OrderedConsumerOptions",
    "OrderedConsumerState",
    "new_name_prefix",
    "serial_from_name",
    "is_transient_create_error",
    "backoff_delay",
    "INACTIVE_THRESHOLD",
    "BACKOFF_INITIAL",
    "BACKOFF_MAX",
    "FLAP_WINDOW",
    "DEFAULT_MAX_RESET_ATTEMPTS",
    "TRANSIENT_CREATE_ERRORS",
]

INACTIVE_THRESHOLD: Final = 300.0
"""Seconds before the server deletes an idle ordered consumer (nats.go: 5 min). Abandoned
serials clean themselves up, whether or not the transport manages to delete them."""
BACKOFF_INITIAL: Final = 1.0
BACKOFF_MAX: Final = 10.0
FLAP_WINDOW: Final = 10.0
"""A consumer reset within this many seconds of its creation, before it delivered anything,
counts as an unsuccessful attempt (it backs off, and counts toward ``max_reset_attempts``)."""
DEFAULT_MAX_RESET_ATTEMPTS: Final = 30
"""Consecutive unsuccessful attempts before giving up: with the 10 s backoff cap about 4.5
minutes of continuous failure, close to the consumers' own inactive threshold."""

_PREFIX_ALPHABET: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_NAME_CHARS: Final = frozenset(_PREFIX_ALPHABET + "-_")
_SUBJECT_FORBIDDEN: Final = frozenset(" \t\r\n\x00")
_KNOWN_POLICIES: Final = frozenset(p.value for p in DeliverPolicy)


class ResetReason(str, enum.Enum):
    """Why the ordered consumer dropped its current server consumer."""

    GAP = "gap"
    """A delivery's consumer sequence was not last + 1 (or its stream sequence went back)."""
    HEARTBEAT_MISSED = "heartbeat_missed"
    CONSUMER_DELETED = "consumer_deleted"
    NO_RESPONDERS = "no_responders"
    RECONNECT = "reconnect"
    FETCH_INTERRUPTED = "fetch_interrupted"
    """A fetch ended on the client's side (timer, error) rather than by the server."""

    def __str__(self) -> str:
        return str(self.value)


class OrderedState(str, enum.Enum):
    """Where the ordered consumer is in its life."""

    NEW = "new"
    """Nothing created yet; the first consumer is created on first use."""
    CREATING = "creating"
    """A create request for :attr:`OrderedConsumerState.name` is in flight."""
    ACTIVE = "active"
    """The current consumer exists; its deliveries are checked by :meth:`OrderedConsumerState.on_delivery`."""
    BACKOFF = "backoff"
    """Waiting until :meth:`OrderedConsumerState.next_deadline` to create the next consumer."""
    FAILED = "failed"
    """Terminal: :attr:`OrderedConsumerState.error` says why."""
    CLOSED = "closed"
    """Stopped by the user."""

    def __str__(self) -> str:
        return str(self.value)


class Delivery(enum.Enum):
    """The verdict on one delivered message."""

    ACCEPT = "accept"
    """In order: hand it to the user."""
    STALE = "stale"
    """From another serial, or arrived while no consumer is active: drop it silently."""
    GAP = "gap"
    """Out of order: drop it and :meth:`OrderedConsumerState.reset` with ``ResetReason.GAP``."""


# ====================================================================== options


class OrderedConsumerOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The user's options of ``js.ordered_consumer`` (API.md), validated and normalised.

    ``deliver_policy`` None means ``all``, or ``by_start_sequence`` / ``by_start_time`` when
    ``opt_start_seq`` / ``opt_start_time`` is given. ``last_per_subject`` without filters gets
    the filter ``>`` (the server wants one). ``max_reset_attempts`` None means unbounded.
    Picklable, like every config.
    """

    filter_subjects: tuple[str, ...] = ()
    deliver_policy: DeliverPolicy | None = None
    opt_start_seq: int | None = None
    opt_start_time: datetime | None = None
    headers_only: bool = False
    inactive_threshold: float = INACTIVE_THRESHOLD
    max_reset_attempts: int | None = DEFAULT_MAX_RESET_ATTEMPTS

    def __post_init__(self) -> None:
        filters = self.filter_subjects
        if isinstance(filters, str):
            filters = (filters,)
        elif not isinstance(filters, tuple):
            if not isinstance(filters, (list, frozenset, set)) and filters is not None:
                raise InvalidOptionError(f"filter_subjects must be a list of subjects, got {type(filters).__name__}")
            filters = tuple(filters or ())
        for subject in filters:
            if not isinstance(subject, str) or not subject or not _SUBJECT_FORBIDDEN.isdisjoint(subject):
                raise InvalidOptionError(f"invalid filter subject {subject!r}")
        if len(set(filters)) != len(filters):
            raise InvalidOptionError(f"duplicate filter subjects in {list(filters)!r}")

        policy = self.deliver_policy
        seq = self.opt_start_seq
        start = self.opt_start_time
        if policy is not None and not isinstance(policy, DeliverPolicy):
            if not isinstance(policy, str):
                raise InvalidOptionError(f"deliver_policy must be a DeliverPolicy, got {policy!r}")
            policy = DeliverPolicy(policy)
            if policy.value not in _KNOWN_POLICIES:
                raise InvalidOptionError(f"unknown deliver_policy {policy.value!r}")
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 1):
            raise InvalidOptionError(f"opt_start_seq must be an int >= 1, got {seq!r}")
        if start is not None and (not isinstance(start, datetime) or start.utcoffset() is None):
            raise InvalidOptionError(f"opt_start_time must be a timezone-aware datetime, got {start!r}")
        if seq is not None and start is not None:
            raise InvalidOptionError("opt_start_seq and opt_start_time exclude each other")
        if policy is None:
            policy = (
                DeliverPolicy.BY_START_SEQUENCE
                if seq is not None
                else DeliverPolicy.BY_START_TIME
                if start is not None
                else DeliverPolicy.ALL
            )
        if (policy is DeliverPolicy.BY_START_SEQUENCE) != (seq is not None):
            raise InvalidOptionError("deliver_policy by_start_sequence goes with opt_start_seq, and only it")
        if (policy is DeliverPolicy.BY_START_TIME) != (start is not None):
            raise InvalidOptionError("deliver_policy by_start_time goes with opt_start_time, and only it")
        if policy is DeliverPolicy.LAST_PER_SUBJECT and not filters:
            filters = (">",)

        if not isinstance(self.headers_only, bool):
            raise InvalidOptionError(f"headers_only must be a bool, got {self.headers_only!r}")
        threshold = self.inactive_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0:
            raise InvalidOptionError(f"inactive_threshold must be > 0 seconds, got {threshold!r}")
        attempts = self.max_reset_attempts
        if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1):
            raise InvalidOptionError(f"max_reset_attempts must be None or an int >= 1, got {attempts!r}")

        set_ = msgspec.structs.force_setattr
        set_(self, "filter_subjects", filters)
        set_(self, "deliver_policy", policy)
        set_(self, "inactive_threshold", float(threshold))


# ====================================================================== helpers


def new_name_prefix(rng: ChoiceSource, length: int = 22) -> str:
    """A random consumer-name prefix (base62, like a NUID) from an injected generator."""
    return "".join(rng.choice(_PREFIX_ALPHABET) for _ in range(length))


def serial_from_name(name: str) -> int | None:
    """The serial of an ordered consumer name ``<prefix>_<serial>``, None if it has none.
    (nats.go reads only the last character, which breaks from serial 10 on.)"""
    _, sep, tail = name.rpartition("_")
    if not sep or not tail.isascii() or not tail.isdigit():
        return None
    return int(tail)


def backoff_delay(strikes: int) -> float:
    """Seconds to wait before the next creation after ``strikes`` consecutive unsuccessful
    attempts: 0 for none, then 1, 2, 4, 8, 10, 10, ..."""
    if strikes <= 0:
        return 0.0
    if strikes > 8:  # 2**8 is far past the cap; avoid huge powers
        return BACKOFF_MAX
    return min(BACKOFF_INITIAL * float(2 ** (strikes - 1)), BACKOFF_MAX)


TRANSIENT_CREATE_ERRORS: Final[tuple[type[BaseException], ...]] = (
    builtins.TimeoutError,  # jscore's TimeoutError subclasses it
    NoRespondersError,
    ConnectionLostError,
    JetStreamUnavailableError,  # 10008: no meta leader / no quorum, e.g. during an election
    MaximumConsumersLimitError,  # 10026: abandoned serials expire after inactive_threshold
    InsufficientResourcesError,  # memory for the mem_storage consumer may free up
    ConsumerNotFoundError,  # a create racing a delete of the same name
)
"""Create failures worth retrying with backoff. Everything else (StreamNotFoundError first of
all, bad configurations, permissions, a closed connection) ends the ordered consumer."""


def is_transient_create_error(exc: BaseException) -> bool:
    """Whether a failed consumer creation should be retried (see :data:`TRANSIENT_CREATE_ERRORS`).

    :class:`JetStreamNotEnabledError` with ``err_code`` 0 is the transport's rendering of a 503
    no-responders answer from the API (JetStream restarting, a leader moving): transient. With
    a real err_code (10076, 10039) JetStream is off for good.
    """
    if isinstance(exc, StreamNotFoundError):
        return False
    if isinstance(exc, JetStreamNotEnabledError):
        return exc.err_code == 0
    return isinstance(exc, TRANSIENT_CREATE_ERRORS)


# ====================================================================== the machine


class OrderedConsumerState:
    """Cursor, serial and reset schedule of one ordered consumer (pure; see the module doc).

    The transport's loop, in short::

        if st.recreate_due(now):
            cfg = st.start_create(now)              # send CONSUMER.CREATE with cfg
        ... on the reply:   st.created(now, cfg.name, info.delivered.stream_seq)
                      or    st.create_failed(now, exc, cfg.name)
        ... on a delivery:  verdict = st.on_delivery(msg.metadata)
                            GAP -> st.reset(now, ResetReason.GAP)  (returns the old name)
        ... on trouble:     st.reset(now, ResetReason.HEARTBEAT_MISSED / ...)
        ... sleep until     st.next_deadline()

    Attributes to read: ``state``, ``serial``, ``name``, ``stream_seq`` (last delivered stream
    sequence, 0 before the first), ``consumer_seq`` (last delivered consumer sequence of the
    current serial), ``error`` (once FAILED), ``resets`` and ``last_reason``.
    """

    __slots__ = (
        "stream",
        "options",
        "prefix",
        "serial",
        "name",
        "state",
        "stream_seq",
        "consumer_seq",
        "error",
        "resets",
        "last_reason",
        "_cursor_known",
        "_due",
        "_strikes",
        "_created_at",
        "_progress",
    )

    def __init__(self, stream: str, options: OrderedConsumerOptions | None = None, *, name_prefix: str) -> None:
        if not isinstance(name_prefix, str) or not name_prefix or not _NAME_CHARS.issuperset(name_prefix):
            raise InvalidOptionError(f"name_prefix must be letters, digits, '-' or '_', got {name_prefix!r}")
        self.stream = stream
        self.options = options if options is not None else OrderedConsumerOptions()
        self.prefix = name_prefix
        self.serial = 1
        self.name = f"{name_prefix}_1"
        self.state = OrderedState.NEW
        self.stream_seq = 0
        self.consumer_seq = 0
        self.error: BaseException | None = None
        self.resets = 0
        self.last_reason: ResetReason | None = None
        self._cursor_known = False
        self._due = 0.0
        self._strikes = 0
        self._created_at = 0.0
        self._progress = False

    def __repr__(self) -> str:
        return (
            f"<OrderedConsumerState {self.stream}/{self.name} {self.state} stream_seq={self.stream_seq} "
            f"consumer_seq={self.consumer_seq} strikes={self._strikes}>"
        )

    # ------------------------------------------------------------------ queries (pure)

    @property
    def needs_new_consumer(self) -> bool:
        """True unless a server consumer is active. While it is, a fetch reuses it: the cursor
        is contiguous, so the server's own position is exactly where the client stands."""
        return self.state is not OrderedState.ACTIVE

    @property
    def terminated(self) -> bool:
        """FAILED or CLOSED: nothing more will be created."""
        return self.state is OrderedState.FAILED or self.state is OrderedState.CLOSED

    @property
    def strikes(self) -> int:
        """Consecutive unsuccessful attempts so far (0 after any delivered message)."""
        return self._strikes

    def recreate_due(self, now: float) -> bool:
        """Whether a consumer should be created now (first use, or the backoff has run out)."""
        if self.state is OrderedState.NEW:
            return True
        return self.state is OrderedState.BACKOFF and now >= self._due

    def next_deadline(self) -> float | None:
        """When the next creation is due while backing off; None otherwise. Pure."""
        return self._due if self.state is OrderedState.BACKOFF else None

    def is_current(self, consumer_name: str) -> bool:
        """Whether a delivery for ``consumer_name`` (its metadata's consumer) belongs to the
        active consumer. Anything else comes from an older serial and is dropped."""
        return self.state is OrderedState.ACTIVE and consumer_name == self.name

    def consumer_config(self) -> ConsumerConfig:
        """The configuration of the consumer to create for the current serial.

        Until the cursor is known: the user's deliver policy (with its opt_start_seq /
        opt_start_time). After: by_start_sequence at ``stream_seq + 1``, opt_start_time
        cleared. One filter goes as ``filter_subject``, several as ``filter_subjects``.
        """
        o = self.options
        filters = o.filter_subjects
        if self._cursor_known:
            policy: DeliverPolicy | None = DeliverPolicy.BY_START_SEQUENCE
            start_seq: int | None = self.stream_seq + 1
            start_time: datetime | None = None
        else:
            policy, start_seq, start_time = o.deliver_policy, o.opt_start_seq, o.opt_start_time
        return ConsumerConfig(
            name=self.name,
            deliver_policy=policy,
            opt_start_seq=start_seq,
            opt_start_time=start_time,
            ack_policy=AckPolicy.NONE,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=list(filters) if len(filters) > 1 else None,
            headers_only=True if o.headers_only else None,
            inactive_threshold=o.inactive_threshold,
            num_replicas=1,
            mem_storage=True,
        )

    # ------------------------------------------------------------------ creation

    def start_create(self, now: float) -> ConsumerConfig:
        """Mark a create request as in flight and return the configuration to send.

        Only when :meth:`recreate_due` is true; anything else is a transport bug
        (:class:`~jscore.errors.LocalProtocolError`).
        """
        if not self.recreate_due(now):
            raise LocalProtocolError(f"no consumer creation is due (state {self.state})")
        self.state = OrderedState.CREATING
        return self.consumer_config()

    def created(self, now: float, name: str, delivered_stream_seq: int | None = None) -> bool:
        """The create request for ``name`` succeeded. False if it is stale (another serial, or
        the request was abandoned by a reset): the transport may delete that consumer.

        ``delivered_stream_seq`` is the ``delivered.stream_seq`` of the returned ConsumerInfo:
        the stream sequence just before the consumer's first message. Given before the first
        message it pins the cursor, so that a reset before any delivery resumes exactly where
        this consumer would have started (``deliver_policy`` new or last included). It is not
        used for ``last_per_subject``, whose deliveries are not contiguous.
        """
        if self.state is not OrderedState.CREATING or name != self.name:
            return False
        self.state = OrderedState.ACTIVE
        self.consumer_seq = 0
        self._created_at = now
        self._progress = False
        if (
            delivered_stream_seq is not None
            and not self._cursor_known
            and self.options.deliver_policy is not DeliverPolicy.LAST_PER_SUBJECT
        ):
            self.stream_seq = delivered_stream_seq
            self._cursor_known = True
        return True

    def create_failed(self, now: float, error: BaseException, name: str) -> bool:
        """The create request for ``name`` failed with ``error``. False if it is stale.

        A transient error (:func:`is_transient_create_error`) backs off, up to
        ``max_reset_attempts`` in a row; then, or on any other error, the consumer FAILS:
        ``error`` is the create error itself (``StreamNotFoundError`` when the stream is gone),
        or :class:`~jscore.errors.OrderedConsumerResetError` caused by it once attempts ran out.
        """
        if self.state is not OrderedState.CREATING or name != self.name:
            return False
        if not is_transient_create_error(error):
            self._fail(error)
            return True
        self._strike(now, f"creating {name} failed: {error}", error)
        return True

    # ------------------------------------------------------------------ deliveries

    def on_delivery(self, meta: MsgMetadata) -> Delivery:
        """Check one delivered message by its metadata, advancing the cursor if accepted."""
        if self.state is not OrderedState.ACTIVE or meta.consumer != self.name:
            return Delivery.STALE
        seq = meta.sequence
        return Delivery.ACCEPT if self.on_message(seq.stream, seq.consumer) else Delivery.GAP

    def on_message(self, stream_seq: int, consumer_seq: int) -> bool:
        """Advance the cursor with a delivery of the active consumer: True if it is in order,
        False for a gap (the caller drops the message and resets with ``ResetReason.GAP``).

        In order means consumer sequence = last + 1 and a stream sequence past the last one
        (a stream sequence going back would be a duplicate). The caller has checked that the
        delivery belongs to the current consumer (:meth:`is_current`).
        """
        if self.state is not OrderedState.ACTIVE:
            raise LocalProtocolError(f"a delivery checked while no consumer is active (state {self.state})")
        if consumer_seq != self.consumer_seq + 1 or stream_seq <= self.stream_seq:
            return False
        self.consumer_seq = consumer_seq
        self.stream_seq = stream_seq
        self._cursor_known = True
        if not self._progress:
            self._progress = True
            self._strikes = 0
        return True

    # ------------------------------------------------------------------ resets

    def reset(self, now: float, reason: ResetReason) -> str | None:
        """Drop the current consumer and schedule the next serial.

        From ACTIVE: the serial goes up, the consumer sequence starts again from 0 and the next
        creation is due at once, or after a backoff when the dropped consumer flapped (reset
        within :data:`FLAP_WINDOW` of its creation without a single delivery). Returns the
        dropped consumer's name, for a best-effort delete.

        From CREATING: the in-flight request is abandoned (its reply will be stale); the same
        name is retried (same configuration: the server answers with the existing consumer if
        the lost request did create it). From BACKOFF a reconnect makes the creation due at
        once; other reasons change nothing. NEW, FAILED and CLOSED ignore resets. Returns None
        in all these cases.
        """
        state = self.state
        if state is OrderedState.ACTIVE:
            dropped = self.name
            self.resets += 1
            self.last_reason = reason
            self.serial += 1
            self.name = f"{self.prefix}_{self.serial}"
            self.consumer_seq = 0
            if not self._progress and now - self._created_at < FLAP_WINDOW:
                self._strike(now, f"consumer {dropped} reset ({reason}) before delivering anything", None)
            else:
                self._strikes = 0
                self.state = OrderedState.BACKOFF
                self._due = now
            return dropped
        if state is OrderedState.CREATING:
            self.resets += 1
            self.last_reason = reason
            self.state = OrderedState.BACKOFF
            self._due = now + backoff_delay(self._strikes)
        elif state is OrderedState.BACKOFF and reason is ResetReason.RECONNECT:
            self.last_reason = reason
            self._due = min(self._due, now)
        return None

    def fetch_ended(self, now: float, *, clean: bool) -> str | None:
        """A fetch on this consumer ended. ``clean``: the server ended it (batch complete, 404,
        408, a terminal status), so no more messages are coming to its inbox and the next fetch
        reuses the consumer. Otherwise (client timer, error, missed heartbeats) messages may be
        on their way to an inbox nobody reads: reset, returning the dropped name."""
        if clean or self.state is not OrderedState.ACTIVE:
            return None
        return self.reset(now, ResetReason.FETCH_INTERRUPTED)

    # ------------------------------------------------------------------ the end

    def fail(self, error: BaseException) -> None:
        """End the ordered consumer with ``error`` (first error wins; idempotent)."""
        if not self.terminated:
            self._fail(error)

    def close(self) -> str | None:
        """Stop for good; returns the active consumer's name (to delete), if there is one."""
        active = self.name if self.state is OrderedState.ACTIVE else None
        if not self.terminated:
            self.state = OrderedState.CLOSED
        return active

    # ------------------------------------------------------------------ internals

    def _fail(self, error: BaseException) -> None:
        self.state = OrderedState.FAILED
        self.error = error

    def _strike(self, now: float, what: str, cause: BaseException | None) -> None:
        """One more unsuccessful attempt: back off, or fail once the bound is reached."""
        self._strikes += 1
        limit = self.options.max_reset_attempts
        if limit is not None and self._strikes >= limit:
            exc = OrderedConsumerResetError(
                f"ordered consumer on {self.stream!r} gave up after {self._strikes} unsuccessful attempts; last: {what}"
            )
            exc.__cause__ = cause
            self._fail(exc)
            return
        self.state = OrderedState.BACKOFF
        self._due = now + backoff_delay(self._strikes)
