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

This module decides; the transport carries bytes. Two layers:

* :class:`OrderedConsumerState` is the ordered consumer's memory across operations: which
  configuration to create, whether a delivery is accepted, stale (from an older serial: drop
  it silently) or a gap (reset), and when the next creation attempt is due (backoff).
* :class:`OrderedMachine` is one operation of it (a fetch, or a consume read by ``messages()``
  / ``consume()``) as a session sub-machine (:mod:`jscore.machine`): it sends its own
  consumer-create requests and reads their replies on its wildcard inbox, runs a
  :class:`~jscore.pull.FetchMachine` or :class:`~jscore.pull.ConsumeMachine` for the current
  server consumer, checks every delivery against the cursor, resets (:func:`reset_reason_for`
  maps an inner pull's end to a :class:`ResetReason`), waits out the backoff on its own timer,
  keeps a fetch's deadline, and emits the accepted messages, the resets and its end.

Time is passed in (``now``, monotonic seconds). The transport only attaches the machine, feeds
it the user's takes (``MessagesTaken``), ``Stop`` and ``Drain``, and waits on a queue.

Decisions beyond the reference client (written down in its docstrings and in docs/):

* The user's deliver policy holds until the cursor is known, not only for serial 1: nats.go
  switches to by_start_sequence 1 after a reset that happened before the first message, which
  replays the whole stream for ``deliver_policy=new``. The cursor becomes known with the first
  message, or earlier from the ``delivered.stream_seq`` of the create response (see
  :meth:`~OrderedConsumerState.created`), so a reset before the first message loses nothing either.
* The first creation after a reset is immediate (a gap should heal at once); only failures and
  flapping consumers back off: 1 s, doubling, capped at 10 s. After a reconnect, creations that
  fail because JetStream is not ready yet (503, no leader, no answer) are retried every 0.25 s
  for 10 s without counting as failures: a restarted server is resumed from as soon as it can
  serve, not seconds later.
* Bounded: ``max_reset_attempts`` consecutive unsuccessful attempts (failed creates, and
  consumers that died within :data:`FLAP_WINDOW` without delivering anything) end the consumer
  with :class:`~jscore.errors.OrderedConsumerResetError`. A stream that is gone ends it at once
  with :class:`~jscore.errors.StreamNotFoundError`: no reset storm against a deleted stream.
* A fetch reuses the current server consumer while the cursor is contiguous (nats.go creates a
  new consumer for every fetch): :attr:`~OrderedConsumerState.needs_new_consumer` is False while
  the consumer is active, and a fetch resets only when it was abandoned by the client (messages
  might still be on their way to the dead inbox), which the machine knows from the typed
  :attr:`~jscore.pull.FetchFinished.end`.
* A fetch that got nothing when a reset happened goes on within its own deadline (a new pull
  on the new consumer with the time left), and ends by that deadline whatever the backoff.
* A 503 to a pull resets at once (the consume's own retry-after-K-503s is switched off); the
  flap rule paces a consumer that keeps dying.
* Stopping an operation drops its server consumer (pulls were outstanding) without counting
  a reset; the next operation continues from the cursor.
"""

from __future__ import annotations

import builtins
import enum
from datetime import datetime
from collections.abc import Sequence
from itertools import islice
from operator import lt as _lt
from typing import Any, ClassVar, Final, Protocol, Union

import msgspec

from .errors import (
    ConnectionClosedError,
    ConnectionLostError,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    FetchTimeoutError,
    InsufficientResourcesError,
    InvalidOptionError,
    JetStreamError,
    JetStreamNotEnabledError,
    JetStreamUnavailableError,
    LocalProtocolError,
    MaximumConsumersLimitError,
    NatsError,
    NoHeartbeatError,
    NoRespondersError,
    NotJetStreamMessageError,
    OrderedConsumerResetError,
    StreamNotFoundError,
    TimeoutError,
)
from .jsapi import ACTION_CREATE, DEFAULT_API_PREFIX, ApiSubjects, consumer_create_request
from .jsmsg import MsgMetadata, ack_cursor, parse_ack_subject
from .machine import ConnectionClosed, ConnectionLost, ConnectionRestored, SendRequested, Stop
from .models import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, decode_response
from .protocol import MsgReceived, MsgsReceived
from .pull import (
    MIN_LATER_EXPIRES,
    ConsumeMachine,
    ConsumeOptions,
    ConsumerReconnected,
    ConsumeTerminated,
    Drain,
    FetchFinished,
    FetchMachine,
    FetchOptions,
    FlowControlReplyRequested,
    HeartbeatMissed,
    MessageDelivered,
    MessagesDelivered,
    MessagesTaken,
    PullRequested,
    StatusWarning,
    fetch_grace,
    fitted_heartbeat,
    pull_subject,
)
from .validate import check_bool


class ChoiceSource(Protocol):
    """What is needed of an injected generator (a ``random.Random``)."""

    def choice(self, seq: Sequence[str]) -> str: ...

__all__ = [
    "ResetReason",
    "OrderedState",
    "Delivery",
    "OrderedConsumerOptions",
    "OrderedConsumerState",
    "RangePulls",
    "new_name_prefix",
    "serial_from_name",
    "is_transient_create_error",
    "reset_reason_for",
    "backoff_delay",
    "OrderedMachine",
    "OrderedEnd",
    "OrderedMessageDelivered",
    "OrderedColumnsDelivered",
    "OrderedMessagesDelivered",
    "OrderedConsumerReset",
    "OrderedFinished",
    "OrderedConsumerCreated",
    "OrderedEvent",
    "INACTIVE_THRESHOLD",
    "BACKOFF_INITIAL",
    "BACKOFF_MAX",
    "FLAP_WINDOW",
    "RECONNECT_RETRY",
    "RECONNECT_WINDOW",
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
RECONNECT_RETRY: Final = 0.25
"""Seconds between creation attempts in the :data:`RECONNECT_WINDOW` after a reconnect while
the server answers that JetStream is not ready (a restarted server recovering its streams, a
cluster electing its leaders): the consumer is recreated as soon as the server can, without
the 1, 2, 4 s backoff, and without counting strikes."""
RECONNECT_WINDOW: Final = 10.0
"""How long after a reconnect the quick retries of :data:`RECONNECT_RETRY` go on; then the
ordinary backoff takes over."""
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
    report_created: bool = False

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

        check_bool(self.headers_only, "headers_only")
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


def _not_ready(error: BaseException) -> bool:
    """A create failure that says JetStream is not (yet) ready: a 503 no-responders answer, no
    meta leader / quorum (10008), or no answer at all (the 503 rule is
    :func:`is_transient_create_error`'s)."""
    return is_transient_create_error(error) and isinstance(
        error, (JetStreamNotEnabledError, JetStreamUnavailableError, NoRespondersError, builtins.TimeoutError)
    )


def reset_reason_for(error: BaseException) -> ResetReason | None:
    """The reset an inner pull's error calls for, or None: the error is not the chain's
    (a fetch's own refusal, a bad request), and the operation ends with it.

    Missed heartbeats (:class:`NoHeartbeatError`), a 503 to a pull or any no-responders
    answer, a deleted or vanished consumer (``409 Consumer Deleted``, consumer not found), a
    lost connection and a pull the server did not end in time (:class:`FetchTimeoutError`) all
    break the chain: messages may have been lost, or the consumer is gone.
    """
    if isinstance(error, NoHeartbeatError):
        return ResetReason.HEARTBEAT_MISSED
    if isinstance(error, NoRespondersError):  # (PullNoRespondersError too: test it first)
        return ResetReason.NO_RESPONDERS
    if isinstance(error, (ConsumerDeletedError, ConsumerNotFoundError)):
        return ResetReason.CONSUMER_DELETED
    if isinstance(error, ConnectionLostError):
        return ResetReason.RECONNECT
    if isinstance(error, FetchTimeoutError):
        # The server did not end the pull in time: messages may still be on their way to it.
        return ResetReason.FETCH_INTERRUPTED
    return None


# ====================================================================== the machine


class RangePulls:
    """How a range reader (the Spark source's read task) sizes its ordered consumer's no-wait
    pulls, and what it does with a pull that brings nothing or that the server refuses.

    Each pull asks for ``batch`` messages (fewer at the range's end) and, with ``max_bytes``,
    stops at that many bytes too. A pull with the byte limit that brings nothing (its next
    message is over the limit: stored when ``max_payload`` was larger) is followed by a pull of
    one message without it; only if that brings nothing too has the range nothing more. A
    server whose limits (``max_request_batch``, ``max_request_max_bytes``) refuse the sized
    pulls is read with pulls of ``fallback_batch`` messages and no byte limit."""

    __slots__ = ("batch", "max_bytes", "fallback_batch", "_limited")

    def __init__(self, batch: int, max_bytes: int = 0, fallback_batch: int = 0) -> None:
        self.batch = batch
        self.max_bytes = max_bytes
        self.fallback_batch = fallback_batch or batch
        self._limited = True  # (False: the last pull with the limit brought nothing)

    def ask(self, left: int) -> tuple[int, int | None]:
        """(messages, byte limit or None) of the next pull, ``left`` messages before the range's end."""
        if self.max_bytes and not self._limited:
            return 1, None
        return max(1, min(self.batch, left)), (self.max_bytes or None)

    def brought(self) -> None:
        """A pull brought messages: the next one has the byte limit again."""
        self._limited = True

    def nothing(self) -> bool:
        """A pull brought nothing, the consumer not reset: True to ask again (one message
        without the byte limit), False when the range has nothing more."""
        if self.max_bytes and self._limited:
            self._limited = False
            return True
        return False

    def refused(self, description: str) -> bool:
        """The server refused a pull (``description`` of its 409): True when the pulls fall
        back to ``fallback_batch`` messages without a byte limit (ask again), False when that
        does not help (the reader's error)."""
        if not self.max_bytes or description.startswith("Exceeded MaxWaiting"):
            return False
        self.batch, self.max_bytes, self._limited = self.fallback_batch, 0, True
        return True


class OrderedConsumerState:
    """Cursor, serial and reset schedule of one ordered consumer (pure; see the module doc).

    :class:`OrderedMachine` drives it, in short::

        if st.recreate_due(now):
            cfg = st.start_create(now)              # send CONSUMER.CREATE with cfg
        ... on the reply:   st.created(now, cfg.name, info.delivered.stream_seq)
                      or    st.create_failed(now, exc, cfg.name)
        ... on a delivery:  verdict = st.on_delivery(metadata)
                            GAP -> st.reset(now, ResetReason.GAP)  (returns the old name)
        ... on trouble:     st.reset(now, ResetReason.HEARTBEAT_MISSED / ...)
        ... at the end:     st.release(now)  if pulls were still outstanding
        ... its timer:      st.next_deadline()  (the end of a backoff)

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
        "_quick_until",
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
        self._quick_until = 0.0  # quick retries of a not-ready JetStream until then (a reconnect)

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
        if now < self._quick_until and _not_ready(error):
            # Just reconnected and JetStream is not ready yet (a restart, an election): ask
            # again shortly rather than backing off for seconds.
            self.state = OrderedState.BACKOFF
            self._due = now + RECONNECT_RETRY
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
        self._advance(stream_seq, consumer_seq)
        return True

    def _advance(self, stream_seq: int, consumer_seq: int) -> None:
        self.consumer_seq = consumer_seq
        self.stream_seq = stream_seq
        self._cursor_known = True
        if not self._progress:
            self._progress = True
            self._strikes = 0

    def in_order(self, stream_seqs: Sequence[int], consumer_seqs: Sequence[int]) -> bool:
        """Whether a run of one or more deliveries of the active consumer is in order throughout
        (what :meth:`on_messages` takes whole), checked without a step per delivery. Changes
        nothing."""
        n = len(consumer_seqs)
        if n == 0 or n != len(stream_seqs) or self.state is not OrderedState.ACTIVE:
            return False
        first = self.consumer_seq + 1
        return (
            stream_seqs[0] > self.stream_seq
            and consumer_seqs[0] == first
            and consumer_seqs[n - 1] == first + n - 1
            and list(consumer_seqs) == list(range(first, first + n))
            and all(map(_lt, stream_seqs, islice(stream_seqs, 1, None)))
        )

    def on_messages(self, stream_seqs: Sequence[int], consumer_seqs: Sequence[int]) -> int:
        """:meth:`on_message` for a run of deliveries in turn, up to the first one out of order:
        returns how many were in order (the cursor is past them). A run in order throughout
        is checked without a call per delivery."""
        n = len(consumer_seqs)
        if n != len(stream_seqs):
            raise LocalProtocolError("a run's stream and consumer sequences differ in number")
        if n == 0:
            return 0
        if self.state is not OrderedState.ACTIVE:
            raise LocalProtocolError(f"a delivery checked while no consumer is active (state {self.state})")
        if self.in_order(stream_seqs, consumer_seqs):
            self._advance(stream_seqs[n - 1], consumer_seqs[n - 1])
            return n
        ok = 0
        on_message = self.on_message
        while ok < n and on_message(stream_seqs[ok], consumer_seqs[ok]):
            ok += 1
        return ok

    # ------------------------------------------------------------------ resets

    def reset(self, now: float, reason: ResetReason) -> str | None:
        """Drop the current consumer and schedule the next serial.

        From ACTIVE: the serial goes up, the consumer sequence starts again from 0 and the next
        creation is due at once, or after a backoff when the dropped consumer flapped (reset
        within :data:`FLAP_WINDOW` of its creation without a single delivery, for another
        reason than a reconnect). Returns the dropped consumer's name, for a best-effort delete.
        A reconnect also opens the :data:`RECONNECT_WINDOW` of quick retries while JetStream is
        not ready (:meth:`create_failed`).

        From CREATING: the in-flight request is abandoned (its reply will be stale); the same
        name is retried (same configuration: the server answers with the existing consumer if
        the lost request did create it). From BACKOFF a reconnect makes the creation due at
        once; other reasons change nothing. NEW, FAILED and CLOSED ignore resets. Returns None
        in all these cases.
        """
        state = self.state
        if reason is ResetReason.RECONNECT:
            self._quick_until = now + RECONNECT_WINDOW
        if state is OrderedState.ACTIVE:
            dropped = self.name
            self.resets += 1
            self.last_reason = reason
            self.serial += 1
            self.name = f"{self.prefix}_{self.serial}"
            self.consumer_seq = 0
            if not self._progress and now - self._created_at < FLAP_WINDOW and reason is not ResetReason.RECONNECT:
                # (a lost connection says nothing about the consumer: not a flap)
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

    def release(self, now: float) -> str | None:
        """An operation ended while its server consumer may still be delivering (a stopped or
        drained consume, a fetch given up): drop that consumer without counting a reset.

        From ACTIVE: the serial goes up and the next creation (at the cursor) is due at once;
        returns the dropped name, for a best-effort delete. From CREATING: the request is
        abandoned and the same name is created again next time (an identical create succeeds
        if the lost request did create it). Otherwise nothing changes; None.
        """
        state = self.state
        if state is OrderedState.ACTIVE:
            dropped = self.name
            self.serial += 1
            self.name = f"{self.prefix}_{self.serial}"
            self.consumer_seq = 0
            self.state = OrderedState.BACKOFF
            self._due = now
            return dropped
        if state is OrderedState.CREATING:
            self.state = OrderedState.BACKOFF
            self._due = now
        return None

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


# ====================================================================== one operation on a session


class OrderedEnd(str, enum.Enum):
    """How an ordered operation ended (:attr:`OrderedFinished.end`)."""

    DONE = "done"
    """A fetch is over: its pull ended (messages, or none by its expiry)."""
    NOT_READY = "not_ready"
    """A fetch reached its deadline without having pulled at all: no server consumer could be
    made ready in its time (backing off, a create in flight, no connection)."""
    STOPPED = "stopped"
    DRAINED = "drained"
    ERROR = "error"
    """The operation ended with ``error`` (a fetch's own refusal, the connection closed); the
    ordered consumer itself can go on."""
    FAILED = "failed"
    """The ordered consumer is over (``error``: the stream is gone, attempts ran out ...)."""
    CLOSED = "closed"
    """The ordered consumer had been closed before the operation started."""

    def __str__(self) -> str:
        return str(self.value)


class OrderedMessageDelivered(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message in order, for the application, with the metadata it was checked by."""

    msg: MsgReceived
    metadata: MsgMetadata


class OrderedMessagesDelivered(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Messages in order from a run (:meth:`OrderedMachine.receive_msgs`): the same as one
    :class:`OrderedMessageDelivered` per message, in this order, without a
    :class:`MsgMetadata` each. ``stream_seqs[i]`` and ``stamps[i]`` (nanoseconds since the
    epoch) are what ``msgs[i]``'s ack subject says; the rest of its metadata is read from the
    subject when asked for."""

    msgs: list[MsgReceived]
    stream_seqs: list[int]
    stamps: list[int]


class OrderedColumnsDelivered(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A run of deliveries in order, of a machine made with ``columns`` (see
    :class:`OrderedMachine`), as the connection read them in bulk: a
    :class:`jscore.bulk.DeliveryColumns` (its ``seqs`` and ``stamps`` are each message's stream
    sequence and time stamp)."""

    columns: Any


class OrderedConsumerReset(msgspec.Struct, frozen=True, kw_only=True):
    """A notification: the server consumer was dropped for ``reason``; the next one is
    ``serial`` and starts after stream sequence ``stream_seq``. ``error`` is what caused it,
    when there is one."""

    reason: ResetReason
    serial: int
    stream_seq: int
    error: Exception | None = None


class OrderedConsumerCreated(msgspec.Struct, frozen=True, kw_only=True):
    """A notification (only with ``report_created``): the server consumer ``serial`` is ready,
    with ``num_pending`` matching messages ahead of it (the key-value watcher's "caught up"
    signal when there is nothing to deliver)."""

    serial: int
    num_pending: int


class OrderedFinished(msgspec.Struct, frozen=True, kw_only=True):
    """The operation is over (nothing follows): see :class:`OrderedEnd`. ``delivered``
    messages were handed over."""

    end: OrderedEnd
    error: Exception | None
    delivered: int


OrderedEvent = Union[
    OrderedMessageDelivered,
    OrderedMessagesDelivered,
    OrderedConsumerReset,
    OrderedConsumerCreated,
    OrderedFinished,
    SendRequested,
    FlowControlReplyRequested,
    HeartbeatMissed,
    StatusWarning,
    ConsumerReconnected,
]

_ACK_PREFIX: Final = "$JS.ACK."
_PULL: Final = "p"
_CREATE: Final = "c"
_DELETE_TOKEN: Final = "d"


class OrderedMachine:
    """One fetch or one consume of an ordered consumer, as a session sub-machine.

    ``options`` is a :class:`~jscore.pull.FetchOptions` (one fetch: it ends with
    :class:`OrderedFinished`) or a :class:`~jscore.pull.ConsumeOptions` (a consume: it runs
    until ``Stop``, ``Drain`` or a terminal error). ``state`` is the ordered consumer's
    :class:`OrderedConsumerState`, changed only by this machine while it runs.

    Attach it with a wildcard inbox. Replies and statuses are told apart by the last token of
    the inbox subject: ``c<n>`` the n-th consumer-create request, ``p<n>`` the pulls of the
    n-th inner pull machine, ``d`` deletes (ignored); anything older is dropped. Deliveries
    carry the stream's subject instead: they belong to the consumer named in their ack
    subject, and only the active consumer's reach the inner machine. What it does:

    * creates the server consumer when none is active (:class:`SendRequested` to
      ``CONSUMER.CREATE``), times the request out after ``request_timeout``, and backs off on
      failures (:meth:`OrderedConsumerState.create_failed`); while backing off its deadline is
      the next attempt. Nothing is created while the connection is down.
    * runs one inner pull machine on the active consumer; its pulls leave as
      :class:`SendRequested` to that consumer's ``MSG.NEXT`` subject.
    * checks each delivery: in order it goes out as :class:`OrderedMessageDelivered`; stale
      ones are dropped; a gap resets. A reset (gap, heartbeats missed, consumer deleted, no
      responders, reconnect, a fetch the client gave up) drops the inner machine, deletes the
      old consumer (best effort), tells :class:`OrderedConsumerReset` and goes on with the next
      serial. A fetch that has delivered nothing goes on within its deadline (a re-pull with
      the time left); one that has delivered something ends with it.
    * a fetch ends by ``deadline`` (its client timeout after the start) at the latest;
      :attr:`OrderedEnd.NOT_READY` when no consumer could be made ready by then.
    * ``MessagesTaken`` (consume) reports what the application took from its queue; the
      count carries over to the next inner machine after a reset, so the local buffer stays
      bounded by max_messages / max_bytes across resets.
    """

    RUN_CURSORS: ClassVar[bool] = True
    """The session arms its inbox for the delivery lane: runs come with their ack cursors."""

    def __init__(
        self,
        state: OrderedConsumerState,
        options: FetchOptions | ConsumeOptions,
        now: float,
        *,
        api_prefix: str = DEFAULT_API_PREFIX,
        request_timeout: float = 5.0,
        connected: bool = True,
        columns: bool = False,
    ) -> None:
        if isinstance(request_timeout, bool) or not isinstance(request_timeout, (int, float)) or request_timeout <= 0:
            raise InvalidOptionError(f"request_timeout must be > 0 seconds, got {request_timeout!r}")
        self.run_columns = check_bool(columns, "columns")
        """The session arms its inbox for columns too: a fetch's long runs of deliveries in
        order come as one :class:`OrderedColumnsDelivered` each."""
        self.state = state
        self.connected = connected
        self.delivered = 0
        self.stale = 0
        self.end: OrderedEnd | None = None
        self.error: Exception | None = None
        self._api_prefix = api_prefix
        self._subjects = ApiSubjects(api_prefix)
        self._request_timeout = float(request_timeout)
        self._events: list[Any] = []
        self._broken: BaseException | None = None
        self._started = now
        self._fetch: FetchOptions | None = None
        self._consume: ConsumeOptions | None = None
        self.deadline: float | None = None
        if isinstance(options, FetchOptions):
            self._fetch = options
            self.deadline = now + options.client_timeout
        elif isinstance(options, ConsumeOptions):
            # An ordered consumer has no priority group, and a 503 to a pull breaks the chain
            # at once (the reset's backoff paces the retries, not the consume's).
            self._consume = msgspec.structs.replace(
                options, group=None, pin_id=None, no_responders_limit=1, no_responders_check=False,
                heartbeat_check=False,
            )
        else:
            raise InvalidOptionError(f"options must be FetchOptions or ConsumeOptions, got {type(options).__name__}")
        self._inner: FetchMachine | ConsumeMachine | None = None
        self._inner_token = ""
        self._inner_subject = ""
        self._runs = 0
        self._create_token: str | None = None
        self._create_name = ""
        self._create_due: float | None = None
        self._creates = 0
        self._buffered_messages = 0
        self._buffered_bytes = 0
        self._last: tuple[MsgReceived | None, MsgMetadata | None] = (None, None)
        # The run being fed to the inner machine (receive_msgs): its messages, their stream and
        # consumer sequences and stamps; then how many of them the inner machine settled.
        self._run: tuple[list[MsgReceived], list[int], list[int], list[int]] | None = None
        self._run_settled = 0
        self._finished = False
        if state.state is OrderedState.CREATING:
            state.release(now)  # a create left in flight by an operation that ended abnormally
        self._guard(self._advance, now)

    def __repr__(self) -> str:
        kind = "fetch" if self._fetch is not None else "consume"
        return f"<OrderedMachine {kind} {self.state!r} delivered={self.delivered} end={self.end}>"

    # ------------------------------------------------------------------ the sub-machine protocol

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def broken(self) -> bool:
        """An error escaped one of its calls: every later call but ``drain_events`` raises."""
        return self._broken is not None

    def next_deadline(self) -> float | None:
        """The inner machine's timers, the create request's timeout, the fetch's deadline and
        (connected, nothing in flight) the end of the backoff. Pure."""
        if self._finished:
            return None
        best = self.deadline
        inner = self._inner
        if inner is not None:
            due = inner.next_deadline()
            if due is not None and (best is None or due < best):
                best = due
        due = self._create_due
        if due is not None and (best is None or due < best):
            best = due
        if self.connected and self._create_token is None and inner is None:
            due = self.state.next_deadline()
            if due is not None and (best is None or due < best):
                best = due
        return best

    def drain_events(self) -> list[Any]:
        # (no _check: events queued before the machine broke were decided before the error)
        events = self._events
        self._events = []
        return events

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        """A message of the wildcard inbox. A delivery (its subject is the stream's; its
        reply the ack subject) belongs to the consumer its ack subject names; anything else
        (statuses, create replies) is routed by the last token of the inbox subject."""
        if self._broken is not None:
            self._check()
        if self._finished:
            self.stale += 1
            return
        try:
            reply = msg.reply
            if msg.status is None and reply is not None and reply.startswith(_ACK_PREFIX):
                self._on_user_msg(msg, reply, now)
                return
            subject = msg.subject
            token = subject[subject.rfind(".") + 1 :]
            if token == self._inner_token and self._inner is not None:
                self._inner.receive_msg(msg, now)
                self._pump_inner(now)
            elif token == self._create_token:
                self._on_create_reply(msg, now)
            else:
                self.stale += 1  # an older pull's or create's, or a delete's reply
        except BaseException as exc:
            self._broken = exc
            raise

    def receive_msgs(self, run: MsgsReceived, now: float) -> None:
        """A run of messages in a row on the wildcard inbox (none a status): the same as each
        fed to :meth:`receive_msg` in turn. Deliveries of the active consumer in a row, with v1
        ack subjects (:func:`~jscore.jsmsg.ack_cursor`, or the run's cursors when the
        connection's delivery lane read it), reach the inner machine as one run and
        come out, up to a gap, as one :class:`OrderedMessagesDelivered`. Anything else (a create
        reply, the dropped consumer's messages after a gap, a v2 or malformed ack subject, what
        a completed fetch did not take) goes one by one, and the deliveries after it as a run
        again."""
        if self._broken is not None:
            self._check()
        columns = run.columns
        if columns is not None:
            if self._receive_columns(columns, now):
                return
            msgs, cursors = columns.messages(MsgReceived)  # (one by one after all: a gap, the end)
            run = MsgsReceived(run.sid, msgs, run.size, cursors)
        msgs = run.msgs
        cursors = run.cursors
        n = len(msgs)
        i = 0
        while i < n:
            inner = self._inner
            taken: list[MsgReceived] = []
            if inner is not None and not self._finished:
                name = self.state.name
                seqs: list[int] = []
                cseqs: list[int] = []
                stamps: list[int] = []
                size = 0
                if cursors is not None:  # (the delivery lane read them)
                    j = i
                    while j < n and cursors[j][0] == name:
                        j += 1
                    if j > i:
                        taken = msgs[i:j] if i or j < n else msgs
                        run_cursors = cursors[i:j]
                        seqs = [c[1] for c in run_cursors]
                        cseqs = [c[2] for c in run_cursors]
                        stamps = [c[3] for c in run_cursors]
                        size = run.size if taken is msgs else sum(m.size for m in taken)
                else:
                    for msg in msgs[i:] if i else msgs:
                        reply = msg.reply
                        cursor = ack_cursor(reply) if reply is not None else None
                        if cursor is None or cursor[0] != name:
                            break
                        taken.append(msg)
                        seqs.append(cursor[1])
                        cseqs.append(cursor[2])
                        stamps.append(cursor[3])
                        size += msg.size
            if not taken:
                self.receive_msg(msgs[i], now)
                i += 1
                continue
            assert inner is not None
            try:
                self._run = (taken, seqs, cseqs, stamps)
                self._run_settled = 0
                inner.receive_msgs(run if len(taken) == n else MsgsReceived(run.sid, taken, size), now)
                self._pump_inner(now)
                settled = self._run_settled
            except BaseException as exc:
                self._broken = exc
                raise
            finally:
                self._run = None
            if settled == 0:  # (the inner machine took none: cannot happen to a current one)
                for msg in taken:
                    self.receive_msg(msg, now)
                settled = len(taken)
            i += settled

    def _receive_columns(self, columns: Any, now: float) -> bool:
        """A run the connection read in bulk (:class:`jscore.bulk.DeliveryColumns`): when it is
        the active consumer's, in order, and the fetch being served takes it whole, it is
        counted, the cursor moves past it, and it is handed over as one
        :class:`OrderedColumnsDelivered`: True. Else False, with nothing changed (the caller
        reads it message by message)."""
        inner = self._inner
        if (
            inner is None
            or self._finished
            or not isinstance(inner, FetchMachine)
            or columns.consumer != self.state.name
            or not inner.takes_counted(columns.count, columns.size)
            or not self.state.in_order(columns.seqs, columns.cseqs)
        ):
            return False
        try:
            inner.receive_counted(columns.count, columns.size, now)
            self.state.on_messages(columns.seqs, columns.cseqs)
            self.delivered += columns.count
            self._events.append(OrderedColumnsDelivered(columns=columns))
            self._pump_inner(now)
        except BaseException as exc:
            self._broken = exc
            raise
        return True

    def _on_deliveries(self, delivered: list[MsgReceived], now: float) -> None:
        """The inner machine's run of deliveries: a prefix of the run being fed (it takes them in
        order), each checked against the cursor as :meth:`_on_delivery` does."""
        assert self._run is not None
        taken, seqs, cseqs, stamps = self._run
        n = len(delivered)
        if n > len(taken) or (n and delivered[0] is not taken[0]):
            raise LocalProtocolError("the inner machine delivered messages that are not its run's")
        ok = self.state.on_messages(seqs[:n] if n < len(seqs) else seqs, cseqs[:n] if n < len(cseqs) else cseqs)
        if ok:
            self.delivered += ok
            if self._consume is not None:
                self._buffered_messages += ok
                self._buffered_bytes += sum(m.size for m in delivered[:ok])
            whole = ok == len(taken)
            self._events.append(
                OrderedMessagesDelivered(
                    msgs=taken if whole else delivered[:ok],
                    stream_seqs=seqs if whole else seqs[:ok],
                    stamps=stamps if whole else stamps[:ok],
                )
            )
        if ok < n:
            self._run_settled = ok + 1  # (the rest: the old consumer's, stale one by one)
            self._reset(ResetReason.GAP, now, None)
        else:
            self._run_settled = n

    def _on_user_msg(self, msg: MsgReceived, reply: str, now: float) -> None:
        try:
            meta: MsgMetadata | None = parse_ack_subject(reply)
        except NotJetStreamMessageError:
            meta = None  # (the inner machine delivers it; the check calls it a gap)
        inner = self._inner
        if inner is None or (meta is not None and meta.consumer != self.state.name):
            self.stale += 1  # an older serial's, or nothing is pulling: never shown, never counted
            return
        self._last = (msg, meta)
        inner.receive_msg(msg, now)
        self._pump_inner(now)

    def handle_timeout(self, now: float) -> None:
        self._check()
        self._guard(self._on_timeout, now)

    def handle(self, command: Any, now: float) -> None:
        self._check()
        try:
            self._on_command(command, now)
        except BaseException as exc:
            self._broken = exc
            raise

    # ------------------------------------------------------------------ commands and timers

    def _on_command(self, command: Any, now: float) -> None:
        match command:
            case MessagesTaken(count=count, size=size):
                if count < 0 or size < 0:
                    raise LocalProtocolError(f"MessagesTaken with a negative count or size: {command!r}")
                self._buffered_messages = max(0, self._buffered_messages - count)
                self._buffered_bytes = max(0, self._buffered_bytes - size)
                inner = self._inner
                if inner is not None and not self._finished:
                    inner.handle(command, now)
                    self._pump_inner(now)
            case Stop():
                self._finish(OrderedEnd.STOPPED, None, now)
            case Drain():
                # Nothing more is pulled; what the transport's queue holds still comes first.
                self._finish(OrderedEnd.DRAINED if self._consume is not None else OrderedEnd.STOPPED, None, now)
            case ConnectionLost(error=error):
                self.connected = False
                if not self._finished:
                    cause = ConnectionLostError("the connection was lost")
                    cause.__cause__ = error
                    self._reset(ResetReason.RECONNECT, now, cause)
            case ConnectionRestored(url=url):
                self.connected = True
                if not self._finished:
                    self._events.append(ConsumerReconnected(url))
                    # From a backoff this makes the creation due at once; an active consumer
                    # (one this machine did not see lose the connection) is not trusted.
                    self._reset(ResetReason.RECONNECT, now, None)
            case ConnectionClosed(error=error):
                self.connected = False
                err = error if error is not None else ConnectionClosedError("the connection was closed")
                self._finish(OrderedEnd.ERROR, err, now)
            case _:
                raise LocalProtocolError(f"unknown command for an ordered consumer {command!r}")

    def _on_timeout(self, now: float) -> None:
        if self._finished:
            return
        inner = self._inner
        if inner is not None:
            due = inner.next_deadline()
            if due is not None and due <= now:
                inner.handle_timeout(now)
                self._pump_inner(now)
                if self._finished:
                    return
        if self._create_due is not None and now >= self._create_due:
            name = self._create_name
            self._create_token = None
            self._create_due = None
            err = TimeoutError(
                f"no answer to the creation of ordered consumer {name!r} within {self._request_timeout:g} s"
            )
            self._create_failed(err, name, now)
            return
        self._advance(now)

    # ------------------------------------------------------------------ driving

    def _advance(self, now: float) -> None:
        """Take the next step: end a fetch that is done or out of time, start the inner pull
        machine on an active consumer, or send the create that is due."""
        if self._finished:
            return
        st = self.state
        fetch = self._fetch
        if fetch is not None:
            if self.delivered:
                self._finish(OrderedEnd.DONE, None, now)  # a fetch returns what it got at its first end
                return
            assert self.deadline is not None
            if now >= self.deadline:
                self._finish_at_deadline(now)
                return
        if st.state is OrderedState.FAILED:
            self._finish(OrderedEnd.FAILED, _as_exception(st.error), now)
            return
        if st.state is OrderedState.CLOSED:
            self._finish(OrderedEnd.CLOSED, None, now)
            return
        if not self.connected or self._inner is not None:
            return
        if st.state is OrderedState.ACTIVE:
            self._start_inner(now)
        elif self._create_token is None and st.recreate_due(now):
            self._send_create(now)

    def _finish_at_deadline(self, now: float) -> None:
        if self._inner is not None:
            # (the inner fetch's own timer normally ends it first) given up: messages may still come
            self._reset(ResetReason.FETCH_INTERRUPTED, now, None, advance=False)
        # NOT_READY: no pull could be made in the fetch's whole time (else it simply found nothing)
        ready = self._runs > 0 or self.state.state is OrderedState.ACTIVE
        self._finish(OrderedEnd.DONE if ready else OrderedEnd.NOT_READY, None, now)

    def _start_inner(self, now: float) -> None:
        st = self.state
        inner: FetchMachine | ConsumeMachine
        if self._fetch is not None:
            opts = self._fetch_options(now)
            if opts is None:  # too little time left for another pull
                self._finish(OrderedEnd.DONE, None, now)
                return
            # A 503 to the first pulls of a consumer just created is most likely its leader's
            # interest not having reached this server yet (a cluster): the fetch sends its pull
            # again, as any fetch does. Once the consumer has delivered, a 503 means it is gone:
            # the ordered consumer's own rule recreates it at once.
            inner = FetchMachine(opts, now, resend_on_no_responders=st.consumer_seq == 0)
        else:
            assert self._consume is not None
            inner = ConsumeMachine(
                self._consume, now, buffered_messages=self._buffered_messages, buffered_bytes=self._buffered_bytes
            )
        self._runs += 1
        self._inner = inner
        self._inner_token = f"{_PULL}{self._runs}"
        self._inner_subject = pull_subject(self._api_prefix, st.stream, st.name)
        self._pump_inner(now)

    def _fetch_options(self, now: float) -> FetchOptions | None:
        """The options of the next inner pull: the user's, unchanged, when it starts at once;
        else fitted into the time left (expires plus its grace within the deadline, the
        heartbeat at most half of it or none)."""
        opts = self._fetch
        assert opts is not None and self.deadline is not None
        if now <= self._started:
            return opts
        left = self.deadline - now
        if opts.expires == 0:  # no_wait without expires: the server answers at once
            return msgspec.structs.replace(opts, client_timeout=min(opts.client_timeout, left)) if left > 0 else None
        expires = left - fetch_grace(left)
        if expires < MIN_LATER_EXPIRES:
            return None
        heartbeat = fitted_heartbeat(opts.heartbeat, expires)
        return msgspec.structs.replace(
            opts, expires=expires, heartbeat=heartbeat, client_timeout=min(left, expires + fetch_grace(expires))
        )

    def _pump_inner(self, now: float) -> None:
        """Act on everything the inner pull machine queued."""
        inner = self._inner
        if inner is not None:
            for e in inner.drain_events():
                if inner is not self._inner:
                    return  # a reset or the end dropped it: the rest of its events are moot
                if type(e) is MessageDelivered:
                    self._on_delivery(e.msg, now)
                elif type(e) is MessagesDelivered:
                    self._on_deliveries(e.msgs, now)
                elif type(e) is PullRequested:
                    self._events.append(
                        SendRequested(subject=self._inner_subject, body=e.body, reply_token=self._inner_token)
                    )
                elif type(e) is FlowControlReplyRequested or type(e) is StatusWarning:
                    self._events.append(e)
                elif type(e) is HeartbeatMissed:
                    self._events.append(e)
                    self._reset(ResetReason.HEARTBEAT_MISSED, now, e.error)
                elif type(e) is FetchFinished:
                    self._fetch_ended(e, now)
                elif type(e) is ConsumeTerminated:
                    self._consume_ended(e, now)
                # (pin ids and consumer checks do not apply: no priority group, no check)

    def _on_delivery(self, msg: MsgReceived, now: float) -> None:
        st = self.state
        last_msg, meta = self._last
        if last_msg is msg and meta is not None:
            # (_on_user_msg checked that it is the active consumer's: only the order is left)
            seq = meta.sequence
            verdict = Delivery.ACCEPT if st.on_message(seq.stream, seq.consumer) else Delivery.GAP
        else:
            # Not a JetStream delivery (no ack subject, or a malformed one) on the pull's inbox:
            # it cannot be placed in the stream, so it is a gap.
            meta = None
            verdict = Delivery.GAP
        if verdict is Delivery.ACCEPT:
            assert meta is not None
            self.delivered += 1
            if self._consume is not None:
                self._buffered_messages += 1
                self._buffered_bytes += msg.size
            self._events.append(OrderedMessageDelivered(msg=msg, metadata=meta))
        else:
            self._reset(ResetReason.GAP, now, None)

    def _fetch_ended(self, e: FetchFinished, now: float) -> None:
        self._inner = None
        error = e.error
        if error is not None:
            reason = reset_reason_for(error)
            if reason is not None:
                self._reset(reason, now, error)
                return
            # The fetch's own refusal (a message larger than max_bytes ...): the consumer is fine.
            if self.delivered:
                self._finish(OrderedEnd.DONE, None, now)
            else:
                self._finish(OrderedEnd.ERROR, error, now)
            return
        if not e.server_ended:
            # The client gave up on the pull: messages may still be on their way to it, and the
            # server consumer's position is past them.
            self._reset(ResetReason.FETCH_INTERRUPTED, now, None)
            return
        self._finish(OrderedEnd.DONE, None, now)

    def _consume_ended(self, e: ConsumeTerminated, now: float) -> None:
        self._inner = None
        error = e.error
        reason = reset_reason_for(error) if error is not None else ResetReason.FETCH_INTERRUPTED
        if reason is not None:
            self._reset(reason, now, error)
            return
        assert error is not None
        dropped = self.state.release(now)  # (a terminal status: the consumer may still exist)
        if dropped is not None:
            self._delete(dropped)
        self.state.fail(error)
        self._finish(OrderedEnd.FAILED, error, now)

    def _reset(self, reason: ResetReason, now: float, error: Exception | None, *, advance: bool = True) -> None:
        st = self.state
        before = st.resets
        self._inner = None
        dropped = st.reset(now, reason)
        if st.state is not OrderedState.CREATING:
            self._create_token = None  # (its reply, if any, is stale now)
            self._create_due = None
        if st.resets != before:
            self._events.append(
                OrderedConsumerReset(reason=reason, serial=st.serial, stream_seq=st.stream_seq, error=error)
            )
        if dropped is not None:
            self._delete(dropped)
        if advance:
            self._advance(now)

    # ------------------------------------------------------------------ consumer creation

    def _send_create(self, now: float) -> None:
        st = self.state
        cfg = st.start_create(now)
        name = cfg.name or st.name
        try:
            subject, body, _ = consumer_create_request(self._subjects, st.stream, cfg, ACTION_CREATE)
        except NatsError as exc:  # an invalid configuration: not worth retrying
            self._create_failed(exc, name, now)
            return
        self._creates += 1
        self._create_token = f"{_CREATE}{self._creates}"
        self._create_name = name
        self._create_due = now + self._request_timeout
        self._events.append(SendRequested(subject=subject, body=body, reply_token=self._create_token))

    def _on_create_reply(self, msg: MsgReceived, now: float) -> None:
        name = self._create_name
        self._create_token = None
        self._create_due = None
        error: NatsError | None = None
        info: ConsumerInfo | None = None
        if msg.status == 503:
            error = JetStreamNotEnabledError(
                503, 0, f"JetStream not available: no responders to the consumer create on {self.state.stream!r}"
            )
        elif msg.status is not None:
            status = f"{msg.status} {msg.description or ''}".rstrip()
            error = JetStreamError(f"the consumer create was answered with status {status}")
        else:
            try:
                info = decode_response(msg.data, ConsumerInfo)
            except NatsError as exc:
                error = exc
            except (msgspec.MsgspecError, ValueError) as exc:
                error = JetStreamError(f"invalid consumer create response: {exc}")
        if error is not None:
            self._create_failed(error, name, now)
            return
        assert info is not None
        if self.state.created(now, name, info.delivered.stream_seq):
            if self.state.options.report_created:
                self._events.append(OrderedConsumerCreated(serial=self.state.serial, num_pending=info.num_pending))
            self._advance(now)
        else:  # (not reached: a stale reply has another token) created for nothing
            self._delete(info.name or name)

    def _create_failed(self, error: NatsError, name: str, now: float) -> None:
        self.state.create_failed(now, error, name)
        self._advance(now)  # a FAILED state ends the operation; a backoff waits for its timer

    def _delete(self, name: str) -> None:
        self._events.append(
            SendRequested(
                subject=self._subjects.consumer_delete(self.state.stream, name),
                reply_token=_DELETE_TOKEN,
                best_effort=True,
            )
        )

    # ------------------------------------------------------------------ the end

    def _finish(self, end: OrderedEnd, error: Exception | None, now: float) -> None:
        if self._finished:
            return
        st = self.state
        running = self._inner is not None
        self._inner = None
        if st.state is OrderedState.CREATING:
            st.release(now)
        elif running and st.state is OrderedState.ACTIVE:
            dropped = st.release(now)  # pulls were outstanding: its position is past what we saw
            if dropped is not None:
                self._delete(dropped)
        self._create_token = None
        self._create_due = None
        self._finished = True
        self.end = end
        self.error = error
        self._events.append(OrderedFinished(end=end, error=error, delivered=self.delivered))

    # ------------------------------------------------------------------ poisoning

    def _check(self) -> None:
        if self._broken is not None:
            raise LocalProtocolError(f"ordered machine is broken by an earlier error: {self._broken!r}")

    def _guard(self, step: Any, now: float) -> None:
        try:
            step(now)
        except BaseException as exc:
            self._broken = exc
            raise


def _as_exception(error: BaseException | None) -> Exception | None:
    if error is None or isinstance(error, Exception):
        return error
    return OrderedConsumerResetError(repr(error))
