"""The pull engine of ADR-37, sans-IO: pull requests, the status table, fetch and consume.

Everything a pull consumer decides lives here; jssync only moves bytes and threads:

* :func:`build_pull_request` is THE one function that builds a ``CONSUMER.MSG.NEXT`` body;
  :func:`pull_subject` gives the subject it is published to (with the machine's inbox as reply).
* :data:`STATUS_TABLE` is the pull family of the status table in :mod:`jscore.status`: one
  :class:`StatusRule` row per JetStream status line a pull can receive, matched by code and exact
  description prefix (:func:`classify_status`). What consume and fetch do with each status is
  data, enumerated by the tests and by ``tools/gen_conformance.py``, which writes
  ``docs/conformance.md`` from it.
* :func:`resolve_consume_options` / :func:`resolve_fetch_options` apply the reference defaults
  and refuse invalid options with :class:`InvalidOptionError` before anything is sent.
* :class:`FetchMachine` (fetch and next) and :class:`ConsumeMachine` (consume) are the state
  machines. They speak the core contract of DESIGN.md: ``receive_msg(msg, now)`` for every
  message of the machine's inbox subscription (already parsed: a :class:`MsgReceived`),
  ``handle(command, now)`` for the application and the connection, ``handle_timeout(now)``,
  ``next_deadline()`` (pure) and ``next_event()``. Pull requests leave as
  :class:`PullRequested` events, for the transport to publish.

How a transport drives a machine (the same for both):

1. create it (it queues the first :class:`PullRequested` at once) and subscribe its inbox;
2. publish the ``body`` of every :class:`PullRequested` to :func:`pull_subject` with the inbox
   as the reply subject; publish an empty message to the ``reply`` of every
   :class:`FlowControlReplyRequested`;
3. feed every message of the inbox to ``receive_msg`` (or a run of messages in a row, none a
   status, to ``receive_msgs``); hand every :class:`MessageDelivered` and the messages of
   every :class:`MessagesDelivered` to the user; report each message the user took from the local queue with
   ``handle(MessagesTaken(count, size))`` (consume only);
4. report ``ConnectionLost`` / ``ConnectionRestored`` / ``ConnectionClosed``; call
   ``handle_timeout(now)`` when ``next_deadline()`` passes;
5. stop when :class:`FetchFinished` / :class:`ConsumeTerminated` comes out: nothing is delivered
   after it, late messages are ignored (and must not be acked: they are redelivered).

An exception escaping a machine poisons it: every later call raises
:class:`LocalProtocolError`. Malformed server input (pending headers that are not numbers, an
unknown status) never raises: it is classified or ignored.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from typing import Final, NoReturn, Union

import msgspec

from . import status as _status
from .errors import (
    ConnectionLostError,
    FetchTimeoutError,
    InvalidOptionError,
    LocalProtocolError,
    NatsError,
    NoHeartbeatError,
    PullNoRespondersError,
    PullStatusError,
)
from .headers import Headers
from .jsapi import check_consumer_name, check_group_name, check_stream_name
from .models import ConsumerConfig, PriorityPolicy
from .protocol import MsgReceived, MsgsReceived
from .machine import ConnectionClosed, ConnectionLost, ConnectionRestored, Stop
from .validate import check_bool

__all__ = [
    # wire
    "NATS_PENDING_MESSAGES",
    "NATS_PENDING_BYTES",
    "NATS_PIN_ID",
    "BYTES_MODE_BATCH",
    "build_pull_request",
    "pull_subject",
    # status table
    "Disposition",
    "CONSUME_DISPOSITIONS",
    "FETCH_DISPOSITIONS",
    "DISPOSITION_TEXT",
    "StatusRule",
    "STATUS_TABLE",
    "UNKNOWN_STATUS",
    "classify_status",
    "status_error",
    "pending_from_headers",
    # options
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_EXPIRES",
    "NO_WAIT_TIMEOUT",
    "NO_WAIT_SILENCE",
    "ConsumeOptions",
    "FetchOptions",
    "resolve_consume_options",
    "resolve_fetch_options",
    "check_priority",
    "consume_expires",
    "fetch_grace",
    "fitted_heartbeat",
    "heartbeat_check_after",
    # commands
    "Stop",
    "Drain",
    "InboxDrained",
    "ConnectionLost",
    "ConnectionRestored",
    "ConnectionClosed",
    "ConsumerGone",
    "ConsumerPresent",
    "MessagesTaken",
    "AckNext",
    "PullCommand",
    # events
    "PullRequested",
    "AckNextRequested",
    "MessageDelivered",
    "MessagesDelivered",
    "FlowControlReplyRequested",
    "HeartbeatMissed",
    "StatusWarning",
    "PinIdChanged",
    "PinIdCleared",
    "FetchEnd",
    "FetchFinished",
    "ConsumeTerminated",
    "ConsumerReconnected",
    "ConsumerCheckRequested",
    "PullEvent",
    # machines
    "PullState",
    "FetchMachine",
    "ConsumeMachine",
]

NATS_PENDING_MESSAGES: Final = "Nats-Pending-Messages"
NATS_PENDING_BYTES: Final = "Nats-Pending-Bytes"
NATS_PIN_ID: Final = "Nats-Pin-Id"

ACK_BODY: Final = b"+ACK"

BYTES_MODE_BATCH: Final = 1_000_000
"""The batch of a pull limited by bytes: a large number, because the server delivers only ONE
message when a request has no batch (ADR-37)."""

_NS: Final = 1_000_000_000
_MAX_COUNT: Final = 2**31 - 1  # batch-like counts must fit a signed 32-bit int
_MAX_BYTES: Final = 2**63 - 1
_MAX_HEADER_DIGITS: Final = 20  # 2**64 has 20 digits; longer is garbage, not a count


def _fail(message: str) -> NoReturn:
    raise InvalidOptionError(message)


# ============================================================================ the wire


class _PullRequest(msgspec.Struct, omit_defaults=True):
    # Field order IS the wire order; zero values are omitted (the server's defaults).
    expires: int = 0
    batch: int = 0
    max_bytes: int = 0
    no_wait: bool = False
    idle_heartbeat: int = 0
    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    id: str = ""
    priority: int = 0


_encode_request = msgspec.json.Encoder().encode


def _count(name: str, value: object, minimum: int = 1, maximum: int = _MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        _fail(f"{name} must be >= {minimum}, got {value}")
    if value > maximum:
        _fail(f"{name} must be <= {maximum}, got {value}")
    return value


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        _fail(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)


def _ns(seconds: float) -> int:
    return round(seconds * _NS)


def _pin(value: object) -> str:
    if not isinstance(value, str) or not value or not value.isprintable() or value != value.strip():
        _fail(f"invalid pin id {value!r}")
    return value


def build_pull_request(
    *,
    batch: int,
    max_bytes: int | None = None,
    expires: float | None = None,
    heartbeat: float | None = None,
    no_wait: bool = False,
    group: str | None = None,
    min_pending: int | None = None,
    min_ack_pending: int | None = None,
    pin_id: str | None = None,
    priority: int | None = None,
) -> bytes:
    """The JSON body of a ``CONSUMER.MSG.NEXT`` pull request: the only place one is built.

    Keys in the server's order ``expires, batch, max_bytes, no_wait, idle_heartbeat, group,
    min_pending, min_ack_pending, id, priority``; None and zero values are omitted (they are
    the server's defaults); durations are float seconds here and integer nanoseconds on the
    wire. Checks what the server would refuse (batch < 1, ``2 * heartbeat > expires``, a bad
    group name, priority outside 0-9) and raises :class:`InvalidOptionError` instead.
    """
    req = _PullRequest(batch=_count("batch", batch))
    if max_bytes:
        req.max_bytes = _count("max_bytes", max_bytes, 0, _MAX_BYTES)
    exp = 0.0
    if expires:
        exp = _seconds("expires", expires)
        if exp < 0:
            _fail(f"expires must be >= 0 seconds, got {expires!r}")
        req.expires = _ns(exp)
    if no_wait:
        req.no_wait = True
    if heartbeat:
        hb = _seconds("heartbeat", heartbeat)
        if hb < 0:
            _fail(f"heartbeat must be >= 0 seconds, got {heartbeat!r}")
        if 2 * hb > exp:
            _fail(f"heartbeat {hb} s needs expires >= 2 * heartbeat (the server refuses it otherwise)")
        # (the server compares the two in whole nanoseconds, each rounded on its own here: a
        # heartbeat of exactly half the expiry can round to one nanosecond over it)
        req.idle_heartbeat = min(_ns(hb), req.expires // 2)
    if group is not None:
        req.group = check_group_name(group)
    if min_pending:
        req.min_pending = _count("min_pending", min_pending, 0, _MAX_BYTES)
    if min_ack_pending:
        req.min_ack_pending = _count("min_ack_pending", min_ack_pending, 0, _MAX_BYTES)
    if pin_id is not None:
        req.id = _pin(pin_id)
    if priority:
        req.priority = _count("priority", priority, 0, 9)
    if (req.min_pending or req.min_ack_pending or req.id or req.priority) and not req.group:
        _fail("min_pending, min_ack_pending, pin id and priority need a priority group")
    return _encode_request(req)


def _pull_body(
    opts: ConsumeOptions | FetchOptions,
    batch: int,
    max_bytes: int,
    expires: float,
    heartbeat: float,
    pin_id: str | None,
    no_wait: bool = False,
) -> bytes:
    """A fetch's or a consume's pull: these numbers, the options' priority group fields."""
    return build_pull_request(
        batch=batch,
        max_bytes=max_bytes,
        expires=expires,
        heartbeat=heartbeat,
        no_wait=no_wait,
        group=opts.group,
        min_pending=opts.min_pending,
        min_ack_pending=opts.min_ack_pending,
        pin_id=pin_id,
        priority=opts.priority,
    )


def pull_subject(api_prefix: str, stream: str, consumer: str) -> str:
    """``<prefix>CONSUMER.MSG.NEXT.<stream>.<consumer>``; ``api_prefix`` ends with a dot
    (:func:`jscore.jsapi.api_prefix`). Names are validated (ADR-6)."""
    return f"{api_prefix}CONSUMER.MSG.NEXT.{check_stream_name(stream)}.{check_consumer_name(consumer)}"


# ============================================================================ status table
# The rows live in jscore/status.py (one table for every status the client interprets); these
# names are the pull family's view of it, bound once (classify_status runs for every status).

Disposition = _status.Disposition
D = Disposition
StatusRule = _status.StatusRule

CONSUME_DISPOSITIONS: Final = _status.ALLOWED[_status.Context.CONSUME]
FETCH_DISPOSITIONS: Final = _status.ALLOWED[_status.Context.FETCH]
DISPOSITION_TEXT: Final = _status.DISPOSITION_TEXT

STATUS_TABLE: Final[tuple[StatusRule, ...]] = _status.rules(_status.Context.CONSUME)
"""The pull rows of :data:`jscore.status.STATUS_TABLE`, in matching order (consume and fetch
read the same rows)."""
UNKNOWN_STATUS: Final = _status.catch_all(_status.Context.CONSUME)

_BY_CODE: Final = _status.by_code(_status.Context.CONSUME)


def classify_status(code: int, description: str | None) -> StatusRule:
    """The row of a status line: the first row of ``code`` whose prefix starts
    ``description`` (case-sensitive), else :data:`UNKNOWN_STATUS`."""
    desc = description or ""
    for rule in _BY_CODE.get(code, ()):
        if desc.startswith(rule.description_prefix):
            return rule
    return UNKNOWN_STATUS


def status_error(rule: StatusRule, code: int, description: str | None) -> NatsError:
    """The error a status is reported as: ``rule.error`` (or :class:`PullStatusError`)."""
    cls = rule.error or PullStatusError
    desc = description or ""
    if issubclass(cls, (PullStatusError, PullNoRespondersError)):
        return cls(code, desc)
    return cls(f"pull ended with status {code} {desc}".rstrip())


def _header_count(headers: Headers, key: str) -> int | None:
    value = headers.get(key)
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > _MAX_HEADER_DIGITS:
        return None  # absent, negative, not a number: ignored, never an exception
    return int(value)


def pending_from_headers(headers: Headers | None) -> tuple[int | None, int | None]:
    """``(Nats-Pending-Messages, Nats-Pending-Bytes)`` of a status; None where absent or not
    a non-negative decimal number (garbage is ignored rather than trusted)."""
    if not headers:
        return None, None
    return _header_count(headers, NATS_PENDING_MESSAGES), _header_count(headers, NATS_PENDING_BYTES)


# ============================================================================ options

DEFAULT_MAX_MESSAGES: Final = 500
DEFAULT_EXPIRES: Final = 30.0
MIN_CONSUME_EXPIRES: Final = 1.0
MIN_HEARTBEAT: Final = 0.5
MAX_HEARTBEAT: Final = 30.0
FETCH_DEFAULT_HEARTBEAT: Final = 5.0
FETCH_HEARTBEAT_FROM: Final = 10.0  # fetch uses heartbeats by default only from this expires on
NO_WAIT_TIMEOUT: Final = 5.0
"""Client timer of a no_wait fetch without expires: the server answers at once (messages, then
404/408), so this only guards against a lost answer (see :data:`NO_WAIT_SILENCE`)."""
NO_WAIT_SILENCE: Final = 1.0
"""A no_wait fetch without expires ends with :class:`FetchTimeoutError` when nothing at all
(message or status) came for this long: a live server answers such a pull at once and without
pauses, unless the consumer is at ``max_ack_pending`` (then it holds the pull, silent, until acks
make room), so a second of silence means that, or a server or link that stopped answering."""
FETCH_RESENDS: Final = 3
"""How many times a fetch sends its pull again after a 503 (nobody received it) before it ends
with :class:`PullNoRespondersError`; the first re-send waits :data:`FETCH_RESEND_BACKOFF`, each
next one twice as long (0.35 s in all)."""
FETCH_RESEND_BACKOFF: Final = 0.05
MIN_LATER_EXPIRES: Final = 0.05
"""A later pull of a fetch (sent again after a 503, or the ordered consumer's after a reset)
goes only while at least this much of the fetch's time is left for its expiry."""
DEFAULT_NO_RESPONDERS_LIMIT: Final = 3
DEFAULT_NO_RESPONDERS_BACKOFF: Final = 1.0
MAX_NO_RESPONDERS_BACKOFF: Final = 2.0
"""The longest wait between pulls answered 503 (or the first backoff, if longer). A 503 to a
pull means the consumer has no leader yet (an election after a node died) or JetStream is not
available; a pull is cheap for the server, so the consume asks at least every 2 s and resumes
within 2 s of the election (nats.go waits up to 10 s, which a ledger soak measured as 15 s of
stall after the consumer leader's node was killed)."""
REFUSED_BACKOFF: Final = 1.0
"""Consume: the first wait before re-pulling after a refused pull that was refused again, or
after an unknown status (doubled per repetition without a message in between)."""
MAX_REFUSED_BACKOFF: Final = 10.0


class ConsumeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Resolved consume options (:func:`resolve_consume_options`). ``max_bytes`` 0 means the
    buffer is counted in messages; otherwise in bytes, and ``max_messages`` is the fixed
    :data:`BYTES_MODE_BATCH` of every pull."""

    max_messages: int
    max_bytes: int
    expires: float
    heartbeat: float
    threshold_messages: int
    threshold_bytes: int
    group: str | None = None
    min_pending: int = 0
    min_ack_pending: int = 0
    priority: int = 0
    pin_id: str | None = None
    no_responders_limit: int = DEFAULT_NO_RESPONDERS_LIMIT
    no_responders_backoff: float = DEFAULT_NO_RESPONDERS_BACKOFF
    no_responders_check: bool = False
    heartbeat_check: bool = False

    @property
    def by_bytes(self) -> bool:
        return self.max_bytes > 0


class FetchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Resolved fetch / next options (:func:`resolve_fetch_options`). ``expires`` 0: a
    no_wait pull without expiry; ``heartbeat`` 0: no heartbeats; ``max_bytes`` 0: no byte
    limit. ``client_timeout`` is the client's own timer, longer than the server's expiry."""

    batch: int
    max_bytes: int
    expires: float
    heartbeat: float
    no_wait: bool
    client_timeout: float
    group: str | None = None
    min_pending: int = 0
    min_ack_pending: int = 0
    priority: int = 0
    pin_id: str | None = None


def _priority_options(
    group: str | None,
    min_pending: int | None,
    min_ack_pending: int | None,
    priority: int | None,
    pin_id: str | None,
) -> tuple[str | None, int, int, int, str | None]:
    g = check_group_name(group) if group is not None else None
    mp = _count("min_pending", min_pending, 0, _MAX_BYTES) if min_pending is not None else 0
    map_ = _count("min_ack_pending", min_ack_pending, 0, _MAX_BYTES) if min_ack_pending is not None else 0
    pr = _count("priority", priority, 0, 9) if priority is not None else 0
    pin = _pin(pin_id) if pin_id is not None else None
    if g is None and (min_pending is not None or min_ack_pending is not None or priority is not None or pin):
        _fail("min_pending, min_ack_pending, priority and pin_id need a priority group (group=...)")
    return g, mp, map_, pr, pin


def _heartbeat(value: object, expires: float) -> float:
    hb = _seconds("heartbeat", value)
    if not MIN_HEARTBEAT <= hb <= MAX_HEARTBEAT:
        _fail(f"invalid heartbeat {hb} s: must lie in [{MIN_HEARTBEAT}, {MAX_HEARTBEAT}] s")
    if hb > expires / 2:
        _fail(f"invalid heartbeat {hb} s: must be <= expires / 2 = {expires / 2} s")
    return hb


def resolve_consume_options(
    max_messages: int | None = None,
    max_bytes: int | None = None,
    expires: float = DEFAULT_EXPIRES,
    heartbeat: float | None = None,
    threshold_messages: int | None = None,
    threshold_bytes: int | None = None,
    group: str | None = None,
    min_pending: int | None = None,
    min_ack_pending: int | None = None,
    priority: int | None = None,
    pin_id: str | None = None,
    no_responders_limit: int = DEFAULT_NO_RESPONDERS_LIMIT,
    no_responders_backoff: float = DEFAULT_NO_RESPONDERS_BACKOFF,
    no_responders_check: bool = False,
    heartbeat_check: bool = False,
) -> ConsumeOptions:
    """Consume options with ADR-37's defaults (those of nats.go's pull.go), validated.

    * max_messages 500 when neither limit is given; max_messages and max_bytes exclude each
      other; max_bytes alone counts the buffer in bytes with a batch of 1,000,000 per pull.
    * expires 30 s, at least 1 s. heartbeat = expires / 2 capped at 30 s; an explicit one must
      lie in [0.5, 30] s and be <= expires / 2.
    * threshold_messages = ceil(50% of max_messages), threshold_bytes = ceil(50% of
      max_bytes); a threshold above its limit is an error, and so is the threshold of the
      limit not in use (it would be silently ignored).
    * ``no_responders_limit`` (K): consecutive 503s after which the consume ends;
      ``no_responders_backoff``: the first retry delay, doubled per 503, capped at
      :data:`MAX_NO_RESPONDERS_BACKOFF` (or the first delay, if longer).
      ``no_responders_check``: instead of ending, every K-th 503 in a row asks the transport
      whether the consumer still exists (:class:`ConsumerCheckRequested`); it answers
      :class:`ConsumerGone` or nothing, and the consume keeps retrying meanwhile (a cluster
      without quorum, a leader election: ADR-37 allows the check).
    * ``heartbeat_check``: when a heartbeat is late by one interval (nothing for
      :func:`heartbeat_check_after` while a pull is outstanding), ask the transport whether the
      consumer still exists (:class:`ConsumerCheckRequested`) instead of waiting for the
      2 x heartbeat watchdog; it answers :class:`ConsumerPresent` (the pulls are re-sent at
      once if still nothing came) or :class:`ConsumerGone`.
    """
    if max_messages is not None and max_bytes is not None:
        _fail("max_messages and max_bytes exclude each other (ADR-37): give one")
    exp = _seconds("expires", expires)
    if exp < MIN_CONSUME_EXPIRES:
        _fail(f"expires must be >= {MIN_CONSUME_EXPIRES} s for consume, got {expires!r}")
    hb = min(exp / 2, MAX_HEARTBEAT) if heartbeat is None else _heartbeat(heartbeat, exp)
    if max_bytes is not None:
        mb = _count("max_bytes", max_bytes, 1, _MAX_BYTES)
        if threshold_messages is not None:
            _fail("threshold_messages applies to max_messages; with max_bytes use threshold_bytes")
        tb = math.ceil(mb / 2) if threshold_bytes is None else _count("threshold_bytes", threshold_bytes, 0, _MAX_BYTES)
        if tb > mb:
            _fail(f"threshold_bytes {tb} is above max_bytes {mb}")
        mm, tm = BYTES_MODE_BATCH, 0
    else:
        mm = DEFAULT_MAX_MESSAGES if max_messages is None else _count("max_messages", max_messages)
        if threshold_bytes is not None:
            _fail("threshold_bytes applies to max_bytes; with max_messages use threshold_messages")
        tm = math.ceil(mm / 2) if threshold_messages is None else _count("threshold_messages", threshold_messages, 0)
        if tm > mm:
            _fail(f"threshold_messages {tm} is above max_messages {mm}")
        mb, tb = 0, 0
    g, mp, map_, pr, pin = _priority_options(group, min_pending, min_ack_pending, priority, pin_id)
    limit = _count("no_responders_limit", no_responders_limit, 1)
    backoff = _seconds("no_responders_backoff", no_responders_backoff)
    check_bool(no_responders_check, "no_responders_check")
    check_bool(heartbeat_check, "heartbeat_check")
    if backoff <= 0:
        _fail(f"no_responders_backoff must be > 0 seconds, got {no_responders_backoff!r}")
    return ConsumeOptions(
        max_messages=mm,
        max_bytes=mb,
        expires=exp,
        heartbeat=hb,
        threshold_messages=tm,
        threshold_bytes=tb,
        group=g,
        min_pending=mp,
        min_ack_pending=map_,
        priority=pr,
        pin_id=pin,
        no_responders_limit=limit,
        no_responders_backoff=backoff,
        no_responders_check=no_responders_check,
        heartbeat_check=heartbeat_check,
    )


def check_priority(
    config: ConsumerConfig | None,
    consumer: str,
    operation: str,
    *,
    group: str | None = None,
    min_pending: int | None = None,
    min_ack_pending: int | None = None,
    priority: int | None = None,
) -> None:
    """Check a pull's priority-group options against the consumer's configuration (ADR-42),
    before anything is sent; :class:`InvalidOptionError` names the option and the consumer.

    ``operation`` is ``fetch``, ``next``, ``consume`` or ``messages``. ``config`` None (a
    consumer bound without its info) skips the check: the server then answers ``400 Bad
    Request`` for what it refuses (and ignores what it tolerates).

    * A consumer with ``priority_groups``: every pull names one of them (``group``). A consumer
      without: no ``group`` (nats-server 2.15 ignores it; ADR-42 and nats.go refuse it).
    * ``min_pending`` / ``min_ack_pending`` only with the ``overflow`` policy (the server
      refuses them otherwise too).
    * ``priority`` (0-9) only with the ``prioritized`` policy (nats-server 2.15 ignores it
      elsewhere; ADR-42 ties it to that policy).
    * ``pinned_client``: fetch and next are refused (ADR-42: "Fetch should not be supported in
      this mode"): a pin belongs to one pull operation, and a fetch's ends with its one pull.
    """
    if config is None:
        return
    name = repr(consumer)
    groups = list(config.priority_groups or ())
    policy = config.priority_policy
    policy_text = "none" if policy is None else str(policy.value if isinstance(policy, PriorityPolicy) else policy)
    if groups:
        if group is None:
            _fail(f"group: consumer {name} has priority groups {groups}; every {operation} must name one (group=...)")
        if group not in groups:
            _fail(f"group: {group!r} is not a priority group of consumer {name} (its groups: {groups})")
    elif group is not None:
        _fail(f"group: consumer {name} has no priority groups, so {operation} cannot name group {group!r}")
    for option, value in (("min_pending", min_pending), ("min_ack_pending", min_ack_pending)):
        if value is not None and policy != PriorityPolicy.OVERFLOW:
            _fail(f"{option}: only for the overflow priority policy; consumer {name} has policy {policy_text}")
    if priority is not None and policy != PriorityPolicy.PRIORITIZED:
        _fail(f"priority: only for the prioritized priority policy; consumer {name} has policy {policy_text}")
    if policy == PriorityPolicy.PINNED_CLIENT and operation in ("fetch", "next"):
        _fail(
            f"{operation}: consumer {name} uses the pinned_client priority policy, where fetch and next are "
            "not supported (ADR-42); use consume() or messages(), which keep the pin"
        )


def consume_expires(config: ConsumerConfig | None, consumer: str, expires: float | None) -> float:
    """The ``expires`` of a consume's pulls: the user's, or :data:`DEFAULT_EXPIRES`; on a
    ``pinned_client`` consumer, shorter than its ``priority_timeout``.

    nats-server 2.15 restarts the pin's timer only when a *new* pull carrying the pin id
    arrives; a pull waiting at the server does not count. An idle consume sends its next pull
    when the last one expires, so with ``expires >= priority_timeout`` the pinned consume loses
    its pin at every idle expiry and the pin flaps between the clients. So the default is
    ``priority_timeout / 2`` (at most 30 s, at least the 1 s minimum) and an explicit
    ``expires`` that is not shorter than ``priority_timeout`` raises
    :class:`InvalidOptionError`. ``config`` None (bound without info): no adjustment.
    """
    timeout = None
    if config is not None and config.priority_policy == PriorityPolicy.PINNED_CLIENT:
        timeout = config.priority_timeout
    if expires is None:
        if not timeout:
            return DEFAULT_EXPIRES
        return min(DEFAULT_EXPIRES, max(MIN_CONSUME_EXPIRES, timeout / 2))
    if timeout and _seconds("expires", expires) >= timeout:
        _fail(
            f"expires: {expires} s is not shorter than the priority_timeout ({timeout:g} s) of consumer "
            f"{consumer!r}: the pin is kept only by new pulls, and an idle consume pulls again at each "
            "expiry, so it would lose its pin whenever idle (leave expires unset for timeout / 2)"
        )
    return expires


def fetch_grace(expires: float) -> float:
    """How much longer than the server's expiry the client waits for a fetch's end.

    The server starts its expiry clock when it RECEIVES the pull, so the client timer must be
    strictly longer than ``expires`` or the server could still deliver to a pull the client
    gave up (those messages would only come back after ack_wait). 10% of expires, at least
    0.25 s (a round trip on a busy link) and at most 5 s (a lost 408 must not hold ``next()``
    much longer than asked). Normally the server's 408 ends the fetch first.
    """
    return min(max(0.25, 0.1 * expires), 5.0)


def fitted_heartbeat(heartbeat: float, expires: float) -> float:
    """The heartbeat of a pull with a shorter ``expires`` than the one it was asked for: at most
    half of it (the server refuses more), none under :data:`MIN_HEARTBEAT`."""
    fitted = min(heartbeat, expires / 2)
    return fitted if fitted >= MIN_HEARTBEAT else 0.0


def heartbeat_check_after(heartbeat: float) -> float:
    """How long a consume with ``heartbeat_check`` waits for any message (a heartbeat counts)
    before asking whether its consumer is still there: one heartbeat interval plus a quarter of
    it (at most 1 s) for the heartbeat's own travel, i.e. the next heartbeat is late. The
    watchdog's 2 x heartbeat stays the bound when the check gets no answer."""
    return heartbeat + min(heartbeat / 4, 1.0)


def resolve_fetch_options(
    max_messages: int | None = None,
    max_bytes: int | None = None,
    expires: float | None = None,
    heartbeat: float | None = None,
    no_wait: bool = False,
    group: str | None = None,
    min_pending: int | None = None,
    min_ack_pending: int | None = None,
    priority: int | None = None,
    pin_id: str | None = None,
) -> FetchOptions:
    """Fetch / next options, validated. ``next()`` is ``max_messages=1``.

    * At least one of max_messages / max_bytes (ADR-37). max_bytes alone sends a batch of
      1,000,000 with ``max_bytes``; both together send both (the server honours both).
    * expires: 30 s when None; any positive number (no 1 s floor: short polls are legitimate).
      ``no_wait`` without expires sends ``{"batch": n, "no_wait": true}`` and uses a short
      client timer (:data:`NO_WAIT_TIMEOUT`); with expires the server waits up to expires but
      answers as soon as it has anything.
    * heartbeat: 5 s by default only when expires >= 10 s; explicit values in [0.5, 30] s and
      <= expires / 2; ``heartbeat=0`` switches them off; none for a no_wait pull without expires.
    """
    check_bool(no_wait, "no_wait")
    if max_messages is None and max_bytes is None:
        _fail("fetch needs max_messages or max_bytes (ADR-37: at least one is required)")
    mb = 0 if max_bytes is None else _count("max_bytes", max_bytes, 1, _MAX_BYTES)
    batch = BYTES_MODE_BATCH if max_messages is None else _count("max_messages", max_messages)
    if expires is None:
        exp = 0.0 if no_wait else DEFAULT_EXPIRES
    else:
        exp = _seconds("expires", expires)
        if exp <= 0:
            _fail(f"expires must be > 0 seconds, got {expires!r}")
    if heartbeat is None:
        hb = FETCH_DEFAULT_HEARTBEAT if exp >= FETCH_HEARTBEAT_FROM else 0.0
    elif _seconds("heartbeat", heartbeat) == 0:
        hb = 0.0
    elif exp == 0:
        _fail("a no_wait fetch without expires has no heartbeats")
    else:
        hb = _heartbeat(heartbeat, exp)
    g, mp, map_, pr, pin = _priority_options(group, min_pending, min_ack_pending, priority, pin_id)
    timeout = NO_WAIT_TIMEOUT if exp == 0 else exp + fetch_grace(exp)
    return FetchOptions(
        batch=batch,
        max_bytes=mb,
        expires=exp,
        heartbeat=hb,
        no_wait=no_wait,
        client_timeout=timeout,
        group=g,
        min_pending=mp,
        min_ack_pending=map_,
        priority=pr,
        pin_id=pin,
    )


# ============================================================================ commands


class Drain(msgspec.Struct, frozen=True, kw_only=True):
    """Consume: send no more pulls, keep delivering what arrives, end once nothing more can
    arrive (:class:`InboxDrained`) and the local buffer is empty (``MessagesTaken`` brings it
    to 0). The transport unsubscribes the inbox so that only messages already in flight
    arrive. A fetch treats it as :class:`Stop`."""


class InboxDrained(msgspec.Struct, frozen=True, kw_only=True):
    """Consume, after :class:`Drain`: the server has seen the inbox's UNSUB (the session's
    flush after it came back), so every message it sent has been delivered to the machine.
    Before it, an empty buffer does not end a drain: the server may have sent messages that
    are still on their way (it counts them as delivered, pending an ack)."""


class MessagesTaken(msgspec.Struct, frozen=True, kw_only=True):
    """Consume: the user took ``count`` delivered messages of ``size`` bytes in total (the sum
    of their ``MsgReceived.size``) from the local queue, so they no longer count against
    max_messages / max_bytes."""

    count: int = 1
    size: int = 0


class AckNext(msgspec.Struct, frozen=True, kw_only=True):
    """Consume: the application acknowledges the message whose ack subject is ``reply`` and
    asks for the next one (``JsMsg.ack_next``). The machine answers with an
    :class:`AckNextRequested`: ``+NXT`` with a pull of one message to its inbox, counted as
    pending like any pull, when the buffer has room and the consume is running and connected;
    a plain ``+ACK`` otherwise (the next message comes with the consume's own pulls)."""

    reply: str


class ConsumerGone(msgspec.Struct, frozen=True, kw_only=True):
    """Consume, the answer to :class:`ConsumerCheckRequested`: the consumer (or its stream) no
    longer exists; the machine ends with ``error``."""

    error: NatsError


class ConsumerPresent(msgspec.Struct, frozen=True, kw_only=True):
    """Consume, the other answer to :class:`ConsumerCheckRequested`: the consumer exists. After
    a check for a late heartbeat, if still nothing came since the check was asked, the server
    has lost the pulls (a consumer leader that changed without a ``409 Leadership Change``,
    for one): pending is reset and the pulls are sent again at once (no notification: if
    nothing comes of it either, the watchdog reports :class:`HeartbeatMissed` at 2 x
    heartbeat after the last message as usual). Otherwise, and after a 503 check, nothing
    changes."""


PullCommand = Union[
    Stop,
    Drain,
    InboxDrained,
    ConnectionLost,
    ConnectionRestored,
    ConnectionClosed,
    MessagesTaken,
    ConsumerGone,
    ConsumerPresent,
    AckNext,
]


# ============================================================================ events


class PullRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Publish ``body`` to :func:`pull_subject` with the machine's inbox as reply subject.
    ``batch`` and ``max_bytes`` are what the body asks for (0: no byte limit)."""

    body: bytes
    batch: int
    max_bytes: int


class AckNextRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Publish ``body`` to the ack subject ``reply``; with ``pull`` the machine's inbox is the
    reply subject (``+NXT`` asks the server to deliver there), without it there is none (a
    plain ``+ACK``)."""

    reply: str
    body: bytes
    pull: bool


class MessageDelivered(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A user message for the application (the only per-message event)."""

    msg: MsgReceived


class MessagesDelivered(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """User messages for the application, in order: what :class:`MessageDelivered` would give
    for each, from one run fed to ``receive_msgs``."""

    msgs: list[MsgReceived]


class FlowControlReplyRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Publish an empty message to ``reply`` (answer to a '100 FlowControl Request')."""

    reply: str


class HeartbeatMissed(msgspec.Struct, frozen=True, kw_only=True):
    """Consume: nothing arrived for 2 x idle_heartbeat while a pull was outstanding. Not
    terminal: pending was reset and a fresh pull sent. ``error`` is for an error callback."""

    idle_for: float
    error: NoHeartbeatError


class StatusWarning(msgspec.Struct, frozen=True, kw_only=True):
    """Consume: a status worth telling the user about that does not end the consume."""

    code: int
    description: str
    error: NatsError


class PinIdChanged(msgspec.Struct, frozen=True, kw_only=True):
    """A user message carried a new ``Nats-Pin-Id``: later pulls send it as ``id`` (ADR-42).
    A fetch's transport stores it for the consumer's next fetch."""

    pin_id: str


class PinIdCleared(msgspec.Struct, frozen=True, kw_only=True):
    """A 423 said the pin id is not (or no longer) the pinned one; it was dropped and later
    pulls go without ``id``."""

    code: int
    description: str


class FetchEnd(enum.Enum):
    """What ended a fetch (:attr:`FetchFinished.end`): a typed answer to "did the server end
    the pull, or did the client give up on it?" (:attr:`FetchFinished.server_ended`)."""

    BATCH_COMPLETE = "batch_complete"
    """The batch count or max_bytes was reached."""
    STATUS = "status"
    """A status line ended the pull (404, 408, a 409 ...: see ``status`` and ``error``)."""
    CLIENT_TIMER = "client_timer"
    """The client's own timer expired before the server ended the pull."""
    HEARTBEAT_MISSED = "heartbeat_missed"
    STOPPED = "stopped"
    CONNECTION_LOST = "connection_lost"
    CONSUMER_GONE = "consumer_gone"


_SERVER_ENDS: Final = frozenset({FetchEnd.BATCH_COMPLETE, FetchEnd.STATUS})


class FetchFinished(msgspec.Struct, frozen=True, kw_only=True):
    """The fetch is over: ``delivered`` messages came; ``error`` None is a normal end (batch
    or bytes reached, a 404/408, a stop); a silent server (client timer, missed heartbeats) or
    a lost connection is an error; ``status`` is the code that ended it, if any; ``end`` says
    what ended it. ``next()`` raises a TimeoutError subclass when nothing
    was delivered and there is no error: that is the transport's call."""

    error: NatsError | None
    reason: str
    delivered: int
    status: int | None = None
    end: FetchEnd

    @property
    def server_ended(self) -> bool:
        """The server ended the pull (batch or bytes reached, a status line): nothing more
        will arrive for it. Otherwise messages may still be on their way to its inbox."""
        return self.end in _SERVER_ENDS


class ConsumeTerminated(msgspec.Struct, frozen=True, kw_only=True):
    """The consume is over (stop, drain done, terminal status, K no-responders, closed
    connection); ``error`` None for the user's own stop or drain."""

    error: Exception | None
    reason: str


class ConsumerReconnected(msgspec.Struct, frozen=True):
    """Consume: the connection came back (to ``url``); pending was reset and a fresh full
    pull sent."""

    url: str


class ConsumerCheckRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Consume: does the consumer still exist? With ``no_responders_check`` after K (more) 503s
    in a row (``error`` is the last 503's; the machine keeps retrying with backoff meanwhile);
    with ``heartbeat_check`` when a heartbeat is late by one interval (``error`` is a
    :class:`NoHeartbeatError`). The transport asks the server and answers
    :class:`ConsumerGone` if it is gone, :class:`ConsumerPresent` if it is there, nothing when
    the server does not answer (the watchdog stays in charge)."""

    error: Exception


PullEvent = Union[
    PullRequested,
    AckNextRequested,
    MessageDelivered,
    MessagesDelivered,
    FlowControlReplyRequested,
    HeartbeatMissed,
    StatusWarning,
    PinIdChanged,
    PinIdCleared,
    FetchFinished,
    ConsumeTerminated,
    ConsumerReconnected,
    ConsumerCheckRequested,
]


# ============================================================================ machines


class PullState(enum.Enum):
    RUNNING = "running"
    DRAINING = "draining"
    FINISHED = "finished"


_RUNNING: Final = PullState.RUNNING
_DRAINING: Final = PullState.DRAINING
_FINISHED: Final = PullState.FINISHED


def _unknown_command(command: NoReturn) -> NoReturn:
    raise LocalProtocolError(f"unknown command {command!r}")


def _last_pin(headers: Headers | None) -> str | None:
    if not headers:
        return None
    values = headers.get_all(NATS_PIN_ID)
    return values[-1] if values else None


class _Machine:
    """What fetch and consume share: the event queue and the poisoning."""

    def __init__(self) -> None:
        self._events: deque[PullEvent] = deque()
        self._broken: BaseException | None = None
        self.delivered = 0  # user messages delivered
        self.ignored = 0  # messages that arrived after the end (never delivered)
        self.pin_id: str | None = None  # the priority group's pin (ADR-42), once one came

    def _check(self) -> None:
        if self._broken is not None:
            raise LocalProtocolError(f"pull machine is broken by an earlier error: {self._broken!r}")

    def next_event(self) -> PullEvent | None:
        """Pop the next event, or None."""
        self._check()
        return self._events.popleft() if self._events else None

    def _note_pin(self, msg: MsgReceived, taken: list[MsgReceived]) -> list[MsgReceived]:
        """Pin tracking in a run (``receive_msgs``): a message with a new pin id ends the run's
        messages before it (their :class:`MessagesDelivered` first), then comes
        :class:`PinIdChanged`; returns the list ``msg`` joins."""
        pin = _last_pin(msg.headers)
        if pin is not None and pin != self.pin_id:
            self.pin_id = pin
            if taken:
                self._events.append(MessagesDelivered(msgs=taken))
                taken = []
            self._events.append(PinIdChanged(pin_id=pin))
        return taken

    def drain_events(self) -> list[PullEvent]:
        """Every queued event at once (cheaper than ``next_event`` in a loop). Events queued
        before the machine broke are still handed over: they were decided before the error."""
        events = list(self._events)
        self._events.clear()
        return events


class FetchMachine(_Machine):
    """One fetch (or next): one pull, its messages, one :class:`FetchFinished`.

    A pull nobody received (503) is sent again, at most :data:`FETCH_RESENDS` times, unless
    ``resend_on_no_responders`` is False (the ordered consumer once its server consumer has
    delivered: then it recreates the consumer instead).
    Ends when the batch count or byte total is reached, on a status that ends a pull (see
    the table's fetch column), when 2 x heartbeat pass without any message
    (:class:`NoHeartbeatError`), on its client timer (``client_timeout`` after the start, or
    :data:`NO_WAIT_SILENCE` without any answer to a no_wait pull without expires:
    :class:`FetchTimeoutError`, with whatever arrived), on :class:`ConnectionLost`
    (:class:`ConnectionLostError`) or :class:`Stop`. After the end nothing more is delivered;
    late messages are counted in ``ignored``.
    """

    def __init__(self, options: FetchOptions, now: float, *, resend_on_no_responders: bool = True) -> None:
        super().__init__()
        self.options = options
        self.state = _RUNNING
        self.delivered_bytes = 0
        self.pin_id = options.pin_id
        self._track_pin = options.group is not None
        self._deadline = now + options.client_timeout
        # Silence ends the fetch: 2 x heartbeat with heartbeats; a no_wait pull without expires
        # (answered at once, without pauses) after NO_WAIT_SILENCE.
        self._hb_window = 2 * options.heartbeat
        if options.expires == 0 and not self._hb_window:
            self._silence = min(NO_WAIT_SILENCE, options.client_timeout)
        else:
            self._silence = 0.0
        self._last_seen = now
        self._started = now
        # A pull nobody received (503) is sent again: when, how often so far, what ends it.
        self._resend_at: float | None = None
        self._resends = 0 if resend_on_no_responders else FETCH_RESENDS
        self._resend_error: NatsError | None = None
        self._pull(options.expires, options.heartbeat)

    def _pull(self, expires: float, heartbeat: float) -> None:
        opts = self.options
        body = _pull_body(opts, opts.batch, opts.max_bytes, expires, heartbeat, opts.pin_id, opts.no_wait)
        self._events.append(PullRequested(body=body, batch=opts.batch, max_bytes=opts.max_bytes))

    def _room_at(self, at: float) -> tuple[float, float] | None:
        """The expiry and heartbeat of the pull sent again at ``at``: what is left of the
        fetch's expiry, and its heartbeat fitted to it (:func:`fitted_heartbeat`). None when
        there is no room for another pull: past the client timer, or under
        :data:`MIN_LATER_EXPIRES` of expiry left."""
        opts = self.options
        if at >= self._deadline:
            return None
        if opts.expires == 0:
            return 0.0, 0.0
        left = opts.expires - (at - self._started)
        if left < MIN_LATER_EXPIRES:
            return None
        return left, fitted_heartbeat(opts.heartbeat, left)

    @property
    def finished(self) -> bool:
        return self.state is _FINISHED

    # ---------------------------------------------------------------- core contract

    def next_deadline(self) -> float | None:
        """The client timer, the heartbeat deadline or a pull's re-send, whichever is first. Pure."""
        if self.state is _FINISHED:
            return None
        if self._resend_at is not None:
            return self._resend_at
        if self._hb_window:
            return min(self._deadline, self._last_seen + self._hb_window)
        if self._silence:
            return min(self._deadline, self._last_seen + self._silence)
        return self._deadline

    def handle_timeout(self, now: float) -> None:
        self._check()
        try:
            if self.state is _FINISHED:
                return
            opts = self.options
            if self._resend_at is not None:
                if now < self._resend_at:
                    return
                self._resend_at = None
                room = self._room_at(now)
                if room is None:  # (the timer fired late: no room left)
                    assert self._resend_error is not None
                    self._finish(self._resend_error, "no responders", 503)
                else:
                    expires, heartbeat = room
                    self._last_seen = now
                    self._hb_window = 2 * heartbeat
                    self._pull(expires, heartbeat)
                return
            if now >= self._deadline:
                # The server ends every pull itself (408 at expires, 404 for no_wait), so a
                # client timer that runs out means a silent server or a lost answer: say so.
                what = f"expires {opts.expires:g} s" if opts.expires else "no_wait"
                timeout = FetchTimeoutError(
                    f"the server did not end the pull ({what}) within {opts.client_timeout:g} s; "
                    f"{self.delivered} message(s) arrived"
                )
                self._finish(timeout, "client timer expired", None, FetchEnd.CLIENT_TIMER)
            elif self._silence and now >= self._last_seen + self._silence:
                timeout = FetchTimeoutError(
                    f"no answer to the no_wait pull for {now - self._last_seen:.3f} s "
                    f"(a server answers one at once, unless the consumer is at max_ack_pending); "
                    f"{self.delivered} message(s) arrived"
                )
                self._finish(timeout, "no answer", None, FetchEnd.CLIENT_TIMER)
            elif self._hb_window and now >= self._last_seen + self._hb_window:
                err = NoHeartbeatError(
                    f"no heartbeat or message for {now - self._last_seen:.3f} s "
                    f"(idle_heartbeat {self.options.heartbeat} s)"
                )
                self._finish(err, "heartbeats missed", None, FetchEnd.HEARTBEAT_MISSED)
        except BaseException as exc:
            self._broken = exc
            raise

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        """A message of the fetch's inbox (user message or status)."""
        if self._broken is not None:
            self._check()
        try:
            if self.state is _FINISHED:
                self.ignored += 1
                return
            self._last_seen = now
            if self._resend_at is not None and (msg.status is None or msg.status == 100):
                self._resend_at = None  # (a message or a heartbeat: the pull is served after all)
            if msg.status is None:
                self.delivered += 1
                self.delivered_bytes += msg.size
                if self._track_pin:
                    pin = _last_pin(msg.headers)
                    if pin is not None and pin != self.pin_id:
                        self.pin_id = pin
                        self._events.append(PinIdChanged(pin_id=pin))
                self._events.append(MessageDelivered(msg=msg))
                opts = self.options
                if self.delivered >= opts.batch:
                    self._finish(None, "batch complete", None, FetchEnd.BATCH_COMPLETE)
                elif opts.max_bytes and self.delivered_bytes >= opts.max_bytes:
                    self._finish(None, "max_bytes reached", None, FetchEnd.BATCH_COMPLETE)
                return
            self._on_status(msg, now)
        except BaseException as exc:
            self._broken = exc
            raise

    def takes_counted(self, count: int, size: int) -> bool:
        """Whether :meth:`receive_counted` takes a run of ``count`` user messages of ``size``
        bytes: the fetch is going, tracks no pin, and they fit in its batch and stay under its
        byte limit (if it has one: none of them ends the fetch by its bytes)."""
        return (
            self._broken is None
            and self.state is not _FINISHED
            and self._under_max_bytes(size)
            and not self._track_pin
            and self.delivered + count <= self.options.batch
        )

    def _under_max_bytes(self, size: int) -> bool:
        """Whether ``size`` more bytes leave the fetch under its byte limit (none: True), so
        that no message of them ends it by its bytes."""
        max_bytes = self.options.max_bytes
        return not max_bytes or self.delivered_bytes + size < max_bytes

    def receive_counted(self, count: int, size: int, now: float) -> None:
        """A run of ``count`` user messages of ``size`` bytes (as the server counts them) that
        :meth:`takes_counted`, handed over by the caller itself: the accounting of
        :meth:`receive_msgs` for them (the fetch ends when they complete its batch), without a
        :class:`MessagesDelivered`."""
        if not self.takes_counted(count, size) or count < 1:
            raise LocalProtocolError(f"a run of {count} message(s) the fetch does not take as counted")
        try:
            self._last_seen = now
            self._resend_at = None  # (a message: the pull is served after all)
            self.delivered += count
            self.delivered_bytes += size
            if self.delivered >= self.options.batch:
                self._finish(None, "batch complete", None, FetchEnd.BATCH_COMPLETE)
        except BaseException as exc:
            self._broken = exc
            raise

    def receive_msgs(self, msgs: MsgsReceived, now: float) -> None:
        """A run of user messages of the fetch's inbox (none a status): the same as each fed to
        :meth:`receive_msg` in turn, with one :class:`MessagesDelivered`."""
        if self._broken is not None:
            self._check()
        try:
            if self.state is _FINISHED:
                self.ignored += len(msgs.msgs)
                return
            self._last_seen = now
            self._resend_at = None  # (a message: the pull is served after all)
            opts = self.options
            batch = opts.batch
            max_bytes = opts.max_bytes
            run = msgs.msgs
            if self.delivered + len(run) < batch and self._under_max_bytes(msgs.size) and not self._track_pin:
                # The common case: the whole run fits and nothing is checked per message.
                self.delivered += len(run)
                self.delivered_bytes += msgs.size
                self._events.append(MessagesDelivered(msgs=run))
                return
            taken: list[MsgReceived] = []
            for i, msg in enumerate(run):
                self.delivered += 1
                self.delivered_bytes += msg.size
                if self._track_pin:
                    taken = self._note_pin(msg, taken)
                taken.append(msg)
                if self.delivered >= batch or (max_bytes and self.delivered_bytes >= max_bytes):
                    self._events.append(MessagesDelivered(msgs=taken))
                    reason = "batch complete" if self.delivered >= batch else "max_bytes reached"
                    self._finish(None, reason, None, FetchEnd.BATCH_COMPLETE)
                    self.ignored += len(run) - i - 1
                    return
            if taken:
                self._events.append(MessagesDelivered(msgs=taken))
        except BaseException as exc:
            self._broken = exc
            raise

    def handle(self, command: PullCommand, now: float) -> None:
        self._check()
        try:
            match command:
                case Stop() | Drain():
                    if self.state is not _FINISHED:
                        self._finish(None, "stopped", None, FetchEnd.STOPPED)
                case ConnectionLost(error=error) | ConnectionClosed(error=error):
                    if self.state is not _FINISHED:
                        err = ConnectionLostError("the connection was lost while the fetch was in flight")
                        err.__cause__ = error
                        self._finish(err, "connection lost", None, FetchEnd.CONNECTION_LOST)
                case ConnectionRestored() | MessagesTaken() | InboxDrained():
                    pass  # a fetch ended on the loss (or the drain) already; it has no local buffer
                case AckNext(reply=reply):
                    # One pull per fetch: a +NXT would bring a message its batch does not count.
                    self._events.append(AckNextRequested(reply=reply, body=ACK_BODY, pull=False))
                case ConsumerGone(error=error):
                    if self.state is not _FINISHED:  # (a fetch never asks; honoured all the same)
                        self._finish(error, "the consumer is gone", None, FetchEnd.CONSUMER_GONE)
                case ConsumerPresent():
                    pass  # (a fetch never asks: its one pull ends by its watchdog or timer)
                case _:
                    _unknown_command(command)
        except BaseException as exc:
            self._broken = exc
            raise

    # ---------------------------------------------------------------- internals

    def _on_status(self, msg: MsgReceived, now: float) -> None:
        code = msg.status
        assert code is not None
        desc = msg.description or ""
        rule = classify_status(code, desc)
        what = f"{code} {desc}".rstrip()
        match rule.fetch:
            case D.RESEND_PULL:
                # Nobody received the pull, so sending it again cannot deliver twice. On a
                # cluster a consumer just created answers so until its leader's interest
                # reaches this server; a consumer that is gone keeps answering so.
                error = status_error(rule, code, desc)
                at = now + FETCH_RESEND_BACKOFF * 2**self._resends
                if self.delivered or self._resends >= FETCH_RESENDS or self._room_at(at) is None:
                    self._finish(error, what, code)
                else:
                    self._resends += 1
                    self._resend_at = at
                    self._resend_error = error
            case D.HEARTBEAT:
                pass
            case D.FLOW_CONTROL:
                if msg.reply:
                    self._events.append(FlowControlReplyRequested(reply=msg.reply))
            case D.END:
                self._finish(None, what, code)
            case D.END_ERROR:
                self._finish(status_error(rule, code, desc), what, code)
            case D.END_ERROR_IF_EMPTY:
                self._finish(status_error(rule, code, desc) if self.delivered == 0 else None, what, code)
            case _:
                raise LocalProtocolError(f"status table: {rule.fetch} is not a fetch disposition")

    def _finish(self, error: NatsError | None, reason: str, status: int | None, end: FetchEnd | None = None) -> None:
        # (end None: a status line ended it)
        self.state = _FINISHED
        self._events.append(
            FetchFinished(error=error, reason=reason, delivered=self.delivered, status=status,
                          end=FetchEnd.STATUS if end is None else end)
        )


class ConsumeMachine(_Machine):
    """Consume (ADR-37): keep a local buffer filled with pulls on one inbox.

    Accounting. ``pending`` is what the server still owes: += batch / max_bytes of every pull
    sent; -1 / -size for every user message; -Nats-Pending-Messages / -Nats-Pending-Bytes of
    ANY status that carries them; never below 0. ``buffered`` is what was delivered but not
    yet taken by the user (the transport's local queue, reported by :class:`MessagesTaken`).

    The local buffer counts too (our choice; ADR-37 subtracts on "processed"): a pull is sent
    when ``pending + buffered`` falls to the threshold, asking for ``max - pending -
    buffered``, so ``pending + buffered <= max`` and memory stays flat however slow the
    handler is. A delivery moves one message from pending to buffered and never needs a pull:
    only takes, statuses, timers and reconnects do, which keeps the per-message path short.
    In bytes mode the same holds for bytes (batch fixed at 1,000,000; the message counter is
    informational, clamped to that batch).

    Heartbeats. The watchdog runs while a pull is outstanding (pending > 0 in the counted
    unit) and the connection is up: 2 x idle_heartbeat without ANY message emits
    :class:`HeartbeatMissed` (not terminal), resets pending and sends a fresh pull. With
    nothing outstanding the server owes no heartbeat, so none is missed (a full buffer and a
    slow handler are not an outage). With ``heartbeat_check``, a heartbeat late by one interval
    (:func:`heartbeat_check_after`) asks the transport about the consumer first
    (:class:`ConsumerCheckRequested`, once per silence): if it exists and still nothing came,
    pending is reset and the pulls are sent again at once (the watchdog still counts from the
    last message); a consumer leader that moved without telling its pulls is recovered in
    about one heartbeat instead of two.

    Recovery (ADR-37). A consume ends only on 409 Consumer Deleted, 409 Consumer is push based,
    400 Bad Request (the same pull would be refused again), a closed connection or K 503s (see
    below). A pull refused as it arrives (409 Exceeded MaxWaiting / MaxRequestBatch / ...) is
    warned about, forgotten (its batch and max_bytes leave pending) and re-pulled at once; an
    unknown status (an unknown 409 or code) is warned about and re-pulled after a backoff.

    No spin. A pull is re-sent only when pending drops. Refusals in a row (no message in
    between) and unknown statuses wait 1 s before the re-pull, doubling up to 10 s. A 409
    Message Size Exceeds MaxBytes holds pulls for ``expires`` seconds (warned once until a
    message is delivered); 503 no responders retries with doubling backoff and ends after
    ``no_responders_limit`` in a row.
    """

    def __init__(self, options: ConsumeOptions, now: float, *, connected: bool = True,
                 buffered_messages: int = 0, buffered_bytes: int = 0) -> None:
        # buffered_*: messages already in the transport's local queue, delivered by an earlier
        # machine (an ordered consumer's previous server consumer); they count against the
        # buffer until taken.
        super().__init__()
        self.options = options
        self.state = _RUNNING
        self.connected = connected
        self.pin_id = options.pin_id
        self.pulls_sent = 0
        self.pending_messages = 0
        self.pending_bytes = 0
        self.buffered_messages = max(0, buffered_messages)
        self.buffered_bytes = max(0, buffered_bytes)
        self._by_bytes = options.max_bytes > 0
        self._track_pin = options.group is not None
        self._hb_window = 2 * options.heartbeat
        self._last_seen = now
        self._hold_until: float | None = None  # 409 MaxBytes: no pull before this
        self._retry_at: float | None = None  # 503: next attempt
        self._no_responders = 0  # consecutive 503s
        self._refusals = 0  # refused pulls / unknown statuses since a message was delivered
        self._refused_at = -1  # `delivered` at the last refusal
        self._last_pull = (0, 0)  # batch and max_bytes of the last pull sent
        self._warned_at = -1  # `delivered` when the last MaxBytes warning went out
        self._delivered_at_pull = 0  # `delivered` when the last pull went out
        self._wait_take = False  # 409 MaxBytes with a full local buffer: pull after a take
        # heartbeat_check: the check is due this long after the last message; _checked_at is
        # the _last_seen it was asked for (None: not asked since the last message).
        self._check_after = heartbeat_check_after(options.heartbeat) if options.heartbeat_check else 0.0
        self._checked_at: float | None = None
        self._check_open = False  # a check was asked and not yet acted on
        self._inbox_drained = False  # draining: nothing more can arrive (InboxDrained)
        self._maybe_pull(now)

    @property
    def finished(self) -> bool:
        return self.state is _FINISHED

    @property
    def outstanding(self) -> bool:
        """Whether the server still owes something, in the counted unit."""
        return (self.pending_bytes if self._by_bytes else self.pending_messages) > 0

    @property
    def waiting_for_take(self) -> bool:
        """A 409 MaxBytes came while messages were buffered: the next pull waits until the
        application takes one (it may make room for the message that did not fit)."""
        return self._wait_take

    @property
    def pull_blocked_until(self) -> float | None:
        """When a held pull may go (a 409 MaxBytes hold or a 503 backoff); None when free."""
        if self._hold_until is None:
            return self._retry_at
        if self._retry_at is None:
            return self._hold_until
        return max(self._hold_until, self._retry_at)

    # ---------------------------------------------------------------- core contract

    def next_deadline(self) -> float | None:
        """The heartbeat watchdog (while armed), a held pull, a 503 retry. Pure."""
        if self.state is not _RUNNING:
            return None
        best: float | None = None
        if self.connected and self.outstanding:
            if self._check_after and self._checked_at != self._last_seen:
                best = self._last_seen + self._check_after
            else:
                best = self._last_seen + self._hb_window
        for t in (self._hold_until, self._retry_at):
            if t is not None and (best is None or t < best):
                best = t
        return best

    def handle_timeout(self, now: float) -> None:
        self._check()
        try:
            if self.state is not _RUNNING:
                return
            if self._hold_until is not None and now >= self._hold_until:
                self._hold_until = None
            if self._retry_at is not None and now >= self._retry_at:
                self._retry_at = None
            if self.connected and self.outstanding:
                last = self._last_seen
                if now >= last + self._hb_window:
                    self._heartbeat_missed(now)
                elif self._check_after and self._checked_at != last and now >= last + self._check_after:
                    # A heartbeat is late by one interval: has the consumer lost our pulls (a
                    # leader change the server did not announce) or is it gone?
                    self._checked_at = last
                    self._check_open = True
                    err = NoHeartbeatError(
                        f"no heartbeat or message for {now - last:.3f} s (idle_heartbeat {self.options.heartbeat} s)"
                    )
                    self._events.append(ConsumerCheckRequested(error=err))
            self._maybe_pull(now)
        except BaseException as exc:
            self._broken = exc
            raise

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        """A message of the consume's inbox (user message or status). The hot path."""
        if self._broken is not None:
            self._check()
        try:
            state = self.state
            if state is _FINISHED:
                self.ignored += 1
                return
            self._last_seen = now
            if msg.status is None:
                size = msg.size
                p = self.pending_messages - 1
                self.pending_messages = p if p > 0 else 0
                p = self.pending_bytes - size
                self.pending_bytes = p if p > 0 else 0
                self.buffered_messages += 1
                self.buffered_bytes += size
                self.delivered += 1
                if self._track_pin:
                    pin = _last_pin(msg.headers)
                    if pin is not None and pin != self.pin_id:
                        self.pin_id = pin
                        self._events.append(PinIdChanged(pin_id=pin))
                self._events.append(MessageDelivered(msg=msg))
                return
            if state is _RUNNING:
                self._on_status(msg, now)
            # While draining a status changes nothing: no pull will follow anyway.
        except BaseException as exc:
            self._broken = exc
            raise

    def receive_msgs(self, msgs: MsgsReceived, now: float) -> None:
        """A run of user messages of the consume's inbox (none a status): the same as each fed
        to :meth:`receive_msg` in turn, with one :class:`MessagesDelivered`. The hot path."""
        if self._broken is not None:
            self._check()
        try:
            run = msgs.msgs
            count = len(run)
            if self.state is _FINISHED:
                self.ignored += count
                return
            self._last_seen = now
            size = msgs.size
            p = self.pending_messages - count
            self.pending_messages = p if p > 0 else 0
            p = self.pending_bytes - size
            self.pending_bytes = p if p > 0 else 0
            self.buffered_messages += count
            self.buffered_bytes += size
            self.delivered += count
            if self._track_pin:
                taken: list[MsgReceived] = []
                for msg in run:
                    taken = self._note_pin(msg, taken)
                    taken.append(msg)
                run = taken
            self._events.append(MessagesDelivered(msgs=run))
        except BaseException as exc:
            self._broken = exc
            raise

    def handle(self, command: PullCommand, now: float) -> None:
        self._check()
        try:
            match command:
                case MessagesTaken(count=count, size=size):
                    if count < 0 or size < 0:
                        raise LocalProtocolError(f"MessagesTaken with a negative count or size: {command!r}")
                    b = self.buffered_messages - count
                    self.buffered_messages = b if b > 0 else 0
                    b = self.buffered_bytes - size
                    self.buffered_bytes = b if b > 0 else 0
                    self._wait_take = False
                    if self.state is _DRAINING:
                        if self.buffered_messages == 0 and self._inbox_drained:
                            self._terminate(None, "drained")
                    else:
                        self._maybe_pull(now)
                case Stop():
                    if self.state is not _FINISHED:
                        self._terminate(None, "stopped")
                case Drain():
                    if self.state is _RUNNING:
                        self.state = _DRAINING
                        self._hold_until = self._retry_at = None
                        if self.buffered_messages == 0 and self._inbox_drained:
                            self._terminate(None, "drained")
                case InboxDrained():
                    self._inbox_drained = True
                    if self.state is _DRAINING and self.buffered_messages == 0:
                        self._terminate(None, "drained")
                case ConnectionLost():
                    self.connected = False
                case ConnectionRestored(url=url):
                    self.connected = True
                    if self.state is not _FINISHED:
                        self._events.append(ConsumerReconnected(url))
                    if self.state is _RUNNING:
                        # The server may have lost our pulls with the connection: start over.
                        self.pending_messages = self.pending_bytes = 0
                        self._hold_until = self._retry_at = None
                        self._wait_take = False
                        self._refusals = 0
                        self._last_seen = now
                        self._maybe_pull(now)
                case ConnectionClosed(error=error):
                    if self.state is not _FINISHED:
                        err = error or ConnectionLostError("the connection closed for good")
                        self._terminate(err, "connection closed")
                case ConsumerGone(error=error):
                    if self.state is not _FINISHED:
                        self._terminate(error, "the consumer is gone (the server says it does not exist)")
                case ConsumerPresent():
                    if (
                        self.state is _RUNNING
                        and self.connected
                        and self.outstanding
                        and self._check_open
                        and self._checked_at == self._last_seen
                    ):
                        self._check_open = False
                        # Still nothing since the check: the server lost our pulls. Pull again
                        # at once; the watchdog keeps counting from the last message (so a
                        # server that really went silent is still reported at 2 x heartbeat).
                        last = self._last_seen
                        self.pending_messages = self.pending_bytes = 0
                        self._wait_take = False
                        self._maybe_pull(now)
                        self._last_seen = last
                case AckNext(reply=reply):
                    self._ack_next(reply, now)
                case _:
                    _unknown_command(command)
        except BaseException as exc:
            self._broken = exc
            raise

    # ---------------------------------------------------------------- internals

    def _maybe_pull(self, now: float) -> None:
        """Send a pull if the buffer is at or under its threshold and has room."""
        if self.state is not _RUNNING or not self.connected:
            return
        if self._hold_until is not None or self._retry_at is not None or self._wait_take:
            return  # handle_timeout (or the next take) clears them and comes back here
        opts = self.options
        if self._by_bytes:
            used = self.pending_bytes + self.buffered_bytes
            if used > opts.threshold_bytes or used >= opts.max_bytes:
                return
            self._send_pull(BYTES_MODE_BATCH, opts.max_bytes - used, now)
        else:
            used = self.pending_messages + self.buffered_messages
            if used > opts.threshold_messages or used >= opts.max_messages:
                return
            self._send_pull(opts.max_messages - used, 0, now)

    def _pull_body(self, batch: int, max_bytes: int) -> bytes:
        opts = self.options
        return _pull_body(opts, batch, max_bytes, opts.expires, opts.heartbeat, self.pin_id)

    def _send_pull(self, batch: int, max_bytes: int, now: float) -> None:
        body = self._pull_body(batch, max_bytes)
        self._count_pull(batch, max_bytes, now)
        self._events.append(PullRequested(body=body, batch=batch, max_bytes=max_bytes))

    def _count_pull(self, batch: int, max_bytes: int, now: float) -> None:
        if not self.outstanding:
            self._last_seen = now  # the watchdog starts with the first outstanding pull
        self.pending_messages = min(self.pending_messages + batch, BYTES_MODE_BATCH) if self._by_bytes else (
            self.pending_messages + batch
        )
        self.pending_bytes += max_bytes
        self.pulls_sent += 1
        self._delivered_at_pull = self.delivered
        self._last_pull = (batch, max_bytes)

    def _on_status(self, msg: MsgReceived, now: float) -> None:
        code = msg.status
        assert code is not None
        desc = msg.description or ""
        rule = classify_status(code, desc)
        if code != 503:
            self._no_responders = 0
        n, b = pending_from_headers(msg.headers)
        if n is not None:
            p = self.pending_messages - n
            self.pending_messages = p if p > 0 else 0
        if b is not None:
            p = self.pending_bytes - b
            self.pending_bytes = p if p > 0 else 0
        match rule.consume:
            case D.HEARTBEAT:
                pass  # activity only (_last_seen is updated); pending headers, if any, counted
            case D.FLOW_CONTROL:
                if msg.reply:
                    self._events.append(FlowControlReplyRequested(reply=msg.reply))
            case D.REPULL:
                pass
            case D.RESET_REPULL:
                self.pending_messages = self.pending_bytes = 0
            case D.WARN_REPULL:
                self._warn(rule, code, desc)
            case D.WARN_REFUSED_REPULL | D.WARN_BACKOFF_REPULL:
                # ADR-37: a consume recovers from everything but the two 409s it names. The
                # refused (or unknown) pull owes nothing more; which one it was is not said, but
                # the server refuses a pull as it arrives: the last one sent.
                if n is None and b is None:
                    self._forget_last_pull()
                if self._refused_at != self.delivered:
                    self._refusals = 0  # a message came since the last one: a new streak
                self._refused_at = self.delivered
                self._refusals += 1
                self._warn(rule, code, desc)
                k = self._refusals - (1 if rule.consume is D.WARN_REFUSED_REPULL else 0)
                if k > 0:  # (the first refusal of a streak re-pulls at once)
                    delay = min(REFUSED_BACKOFF * 2 ** (k - 1), MAX_REFUSED_BACKOFF)
                    at = now + delay
                    if self._retry_at is None or at > self._retry_at:
                        self._retry_at = at
            case D.WARN_NO_SPIN:
                # The server ends every byte-limited pull whose next message does not fit in
                # what is left of its max_bytes with this status, also after delivering some.
                if self.buffered_messages:
                    # The next message may fit once the user takes some: no pull before then
                    # (re-pulling the same small remainder would spin).
                    self._wait_take = True
                elif self.delivered == self._delivered_at_pull:
                    # Nothing came although the buffer is empty: a message larger than the
                    # whole max_bytes. Warn once per streak and pull only once per expires.
                    if self._warned_at != self.delivered:
                        self._warned_at = self.delivered
                        self._warn(rule, code, desc)
                    self._hold_until = now + self.options.expires
                # else: the pull delivered and the buffer is already empty: pull again now.
            case D.CLEAR_PIN_REPULL:
                if n is None and b is None:
                    # "Nats-Pin-Id mismatch" refuses the pull outright; which pull is not
                    # known, and the other pulls carry the same stale id: start over.
                    self.pending_messages = self.pending_bytes = 0
                # The server answered: whatever backoff was running is moot; pull again now
                # (ADR-42: clear the id and keep pulling without it).
                self._retry_at = None
                self._refusals = 0
                if self.pin_id is not None:
                    self.pin_id = None
                    self._events.append(PinIdCleared(code=code, description=desc))
            case D.RETRY_BACKOFF:
                self._no_responders += 1
                error = status_error(rule, code, desc)
                if self._no_responders % self.options.no_responders_limit == 0:
                    if not self.options.no_responders_check:
                        self._terminate(error, f"{self._no_responders} consecutive no-responders statuses")
                        return
                    self._events.append(ConsumerCheckRequested(error=error))
                self._events.append(StatusWarning(code=code, description=desc, error=error))
                self.pending_messages = self.pending_bytes = 0
                delay = self.options.no_responders_backoff * 2 ** (self._no_responders - 1)
                cap = max(MAX_NO_RESPONDERS_BACKOFF, self.options.no_responders_backoff)
                self._retry_at = now + min(delay, cap)
            case D.TERMINAL:
                self._terminate(status_error(rule, code, desc), f"{code} {desc}".rstrip())
                return
            case _:
                raise LocalProtocolError(f"status table: {rule.consume} is not a consume disposition")
        self._maybe_pull(now)

    def _ack_next(self, reply: str, now: float) -> None:
        """+NXT: ack, and a pull of one message to our inbox, counted like any pull (so the
        buffer bound holds); a plain +ACK when there is no room, nothing running or no link."""
        opts = self.options
        if self.state is _RUNNING and self.connected and self._hold_until is None and self._retry_at is None:
            if self._by_bytes:
                room = opts.max_bytes - self.pending_bytes - self.buffered_bytes
                if room > 0:
                    self._events.append(
                        AckNextRequested(reply=reply, body=b"+NXT " + self._pull_body(1, room), pull=True)
                    )
                    self._count_pull(1, room, now)
                    return
            elif self.pending_messages + self.buffered_messages < opts.max_messages:
                self._events.append(AckNextRequested(reply=reply, body=b"+NXT " + self._pull_body(1, 0), pull=True))
                self._count_pull(1, 0, now)
                return
        self._events.append(AckNextRequested(reply=reply, body=ACK_BODY, pull=False))

    def _heartbeat_missed(self, now: float) -> None:
        idle = now - self._last_seen
        err = NoHeartbeatError(f"no heartbeat or message for {idle:.3f} s (idle_heartbeat {self.options.heartbeat} s)")
        self._events.append(HeartbeatMissed(idle_for=idle, error=err))
        self.pending_messages = self.pending_bytes = 0
        self._wait_take = False
        self._last_seen = now
        self._checked_at = None

    def _forget_last_pull(self) -> None:
        batch, max_bytes = self._last_pull
        p = self.pending_messages - batch
        self.pending_messages = p if p > 0 else 0
        p = self.pending_bytes - max_bytes
        self.pending_bytes = p if p > 0 else 0

    def _warn(self, rule: StatusRule, code: int, desc: str) -> None:
        self._events.append(StatusWarning(code=code, description=desc, error=status_error(rule, code, desc)))

    def _terminate(self, error: Exception | None, reason: str) -> None:
        self.state = _FINISHED
        self._hold_until = self._retry_at = None
        self._events.append(ConsumeTerminated(error=error, reason=reason))
