"""JetStream publishing, sans-IO: publish options as headers, the publish-outcome policy, and
the async and bulk publish windows.

All pure (no I/O, no threads, no clock: ``now`` is passed in):

* :func:`publish_headers` turns the publish options (``msg_id``, the ``expected_*`` conditions,
  ``ttl``) into the ``Nats-*`` headers the server reads, validating every option first
  (:class:`InvalidOptionError` before anything is sent).
* :func:`classify_reply` and :class:`PublishPolicy`: what a reply to a publish means (from the
  status table of :mod:`jscore.status`) and what happens to the publish then (stored,
  duplicate, definite failure, ambiguous, or sent again within a time budget). The one policy
  of ``js.publish``, ``publish_async`` and the bulk writer.
* :class:`PublishWindow` is the bookkeeping of asynchronous publishes: the entries in flight,
  keyed by the reply token of their PubAck, with what is needed to send them again; their
  outcomes (acked, duplicate, failed, unknown); the window accounting; the ack deadlines; the
  re-sends the policy asks for; and what a lost connection means for each entry. After a
  reconnect the entries that carry a ``Nats-Msg-Id`` are sent again (the stream deduplicates
  them inside its duplicate window) and only those without one fail, as ambiguous
  (:class:`PubAckTimeoutError`).
* :class:`FrameWindow` is the same for the bulk writer, whose every frame carries a msg id.

Connection generations: the transport numbers its connections (the count of reconnects so far).
An entry records the generation its frame was written on (``gen``); a frame queued while
disconnected belongs to the NEXT connection (the transport sends it after the handshake), so it
is not in doubt when that connection comes up. An entry whose generation is older than the
current connection was written to a connection that is gone: its PubAck may never come.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Final, Generic, NamedTuple, TypeVar

import msgspec

from . import status as _status
from .errors import (
    InvalidOptionError,
    JetStreamAPIError,
    JetStreamError,
    NoStreamResponseError,
    PubAckTimeoutError,
)
from .headers import Headers, HeadersInput
from .models import PubAck, decode_pub_ack
from .status import Disposition

__all__ = [
    "MSG_ID",
    "EXPECTED_STREAM",
    "EXPECTED_LAST_SEQ",
    "EXPECTED_LAST_SUBJECT_SEQ",
    "EXPECTED_LAST_SUBJECT_SEQ_SUBJECT",
    "EXPECTED_LAST_MSG_ID",
    "TTL",
    "PENDING",
    "ACKED",
    "DUPLICATE",
    "FAILED",
    "UNKNOWN",
    "ttl_value",
    "publish_headers",
    "decode_ack",
    "MAX_RETRY_WAIT",
    "Reply",
    "classify_reply",
    "Trouble",
    "Decision",
    "PublishPolicy",
    "PendingPublish",
    "PublishWindow",
    "WindowStats",
    "FrameWindow",
    "DEFAULT_MAX_PENDING_BYTES",
]

MSG_ID: Final = "Nats-Msg-Id"
EXPECTED_STREAM: Final = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ: Final = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: Final = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID: Final = "Nats-Expected-Last-Msg-Id"
TTL: Final = "Nats-TTL"

_OPTION_HEADERS: Final = frozenset(
    h.lower()
    for h in (
        MSG_ID,
        EXPECTED_STREAM,
        EXPECTED_LAST_SEQ,
        EXPECTED_LAST_SUBJECT_SEQ,
        EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
        EXPECTED_LAST_MSG_ID,
        TTL,
    )
)

# Outcomes of an entry. Identity-compared constants (``entry.outcome is PENDING``).
PENDING: Final = "pending"
ACKED: Final = "acked"  # stored: a PubAck with duplicate=False
DUPLICATE: Final = "duplicate"  # already stored: a PubAck with duplicate=True
FAILED: Final = "failed"  # a definite failure: an API error (nothing stored) or no stream
UNKNOWN: Final = "unknown"  # ambiguous: no PubAck came (timeout, connection lost, closed)

_BAD_TEXT: Final = frozenset(chr(c) for c in range(0x20)) | {"\x7f"}
_ack_decoder: Final = msgspec.json.Decoder(PubAck)


class _AckFields(msgspec.Struct):
    """The fields of a publish reply the bulk path looks at (one decode, no ``in`` scan)."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: msgspec.Raw | None = None


_ack_fields_decoder: Final = msgspec.json.Decoder(_AckFields)


def decode_ack(data: bytes) -> PubAck:
    """:func:`jscore.models.decode_pub_ack` with a fast path for the common answer: a PubAck
    body (no ``error``) decoded straight into :class:`PubAck`. Anything else goes through
    ``decode_pub_ack``, which raises the typed error. A body with a backslash takes the slow path
    too: a JSON escape can spell the key ``error`` without the bytes ``"error"``."""
    if b'"error"' not in data and 0x5C not in data:  # 0x5C: a backslash
        try:
            ack = _ack_decoder.decode(data)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass
        else:
            if ack.seq > 0 and ack.stream:
                return ack
    return decode_pub_ack(data)


# ==================================================================================== options


def _text_option(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidOptionError(f"{name} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidOptionError(f"{name} must not be empty")
    if not _BAD_TEXT.isdisjoint(value):
        raise InvalidOptionError(f"{name} {value[:64]!r} has a control character")
    if value != value.strip(" \t"):
        raise InvalidOptionError(f"{name} {value[:64]!r} has leading or trailing whitespace (the server trims it)")
    return value


def check_msg_id(value: object) -> str:
    """A ``Nats-Msg-Id`` value as :func:`publish_headers` accepts it (InvalidOptionError else)."""
    return _text_option("msg_id", value)


def _seq_option(name: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise InvalidOptionError(f"{name} must be >= 0, got {value}")
    if value >= 1 << 64:
        raise InvalidOptionError(f"{name} {value} does not fit in an unsigned 64-bit sequence")
    return str(value)


def ttl_value(ttl: object) -> str:
    """The ``Nats-TTL`` header value for a per-message TTL.

    ``ttl`` is in seconds (int, or a float holding a whole number) and at least 1, or the string
    ``"never"`` (the message never expires, even on a stream with ``max_age``). nats-server reads
    the header as integer seconds or a Go duration, truncates durations to whole seconds and
    refuses anything under one second; so this sends integer seconds and refuses fractions
    rather than let the server silently truncate them. The stream needs ``allow_msg_ttl``.
    """
    if isinstance(ttl, str):
        if ttl.lower() == "never":
            return "never"
        raise InvalidOptionError(f"ttl must be a number of seconds or 'never', got {ttl[:32]!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidOptionError(f"ttl must be a number of seconds or 'never', got {type(ttl).__name__}")
    if not math.isfinite(ttl) or ttl < 1:
        raise InvalidOptionError(f"ttl must be at least 1 second, got {ttl!r}")
    if ttl != int(ttl):
        raise InvalidOptionError(f"ttl must be whole seconds (the server truncates fractions), got {ttl!r}")
    return str(int(ttl))


def publish_headers(
    headers: HeadersInput | None,
    *,
    msg_id: str | None = None,
    expected_stream: str | None = None,
    expected_last_seq: int | None = None,
    expected_last_subject_seq: int | None = None,
    expected_last_subject_seq_subject: str | None = None,
    expected_last_msg_id: str | None = None,
    ttl: float | str | None = None,
) -> tuple[HeadersInput | None, str | None]:
    """Validate the publish options and merge them into the user's headers.

    Returns ``(headers to send, msg id)``. The msg id is the ``msg_id`` option, or the
    ``Nats-Msg-Id`` the user's headers carry, or None; it decides whether the publish may be
    sent again safely. Without options the user's headers are returned unchanged. A header set
    both by an option and in ``headers`` is refused (:class:`InvalidOptionError`): which one
    should win is not obvious.
    """
    opts: list[tuple[str, str]] = []
    if msg_id is not None:
        opts.append((MSG_ID, _text_option("msg_id", msg_id)))
    if expected_stream is not None:
        opts.append((EXPECTED_STREAM, _text_option("expected_stream", expected_stream)))
    if expected_last_seq is not None:
        opts.append((EXPECTED_LAST_SEQ, _seq_option("expected_last_seq", expected_last_seq)))
    if expected_last_subject_seq is not None:
        opts.append((EXPECTED_LAST_SUBJECT_SEQ, _seq_option("expected_last_subject_seq", expected_last_subject_seq)))
    if expected_last_subject_seq_subject is not None:
        if expected_last_subject_seq is None:
            raise InvalidOptionError("expected_last_subject_seq_subject needs expected_last_subject_seq")
        subj = _text_option("expected_last_subject_seq_subject", expected_last_subject_seq_subject)
        if " " in subj or "\t" in subj or any(not t for t in subj.split(".")):
            raise InvalidOptionError(f"expected_last_subject_seq_subject {subj[:64]!r} is not a valid subject")
        opts.append((EXPECTED_LAST_SUBJECT_SEQ_SUBJECT, subj))
    if expected_last_msg_id is not None:
        opts.append((EXPECTED_LAST_MSG_ID, _text_option("expected_last_msg_id", expected_last_msg_id)))
    if ttl is not None:
        opts.append((TTL, ttl_value(ttl)))
    if headers is None:
        return (opts or None), msg_id
    if not opts:
        return headers, _find_msg_id(Headers(headers))
    user = Headers(headers)
    for key, _ in user.items():
        if key.lower() in _OPTION_HEADERS and any(key.lower() == k.lower() for k, _ in opts):
            raise InvalidOptionError(f"header {key!r} is given both as an option and in headers")
    merged = list(user.items())
    merged.extend(opts)
    return merged, msg_id if msg_id is not None else _find_msg_id(user)


def _find_msg_id(headers: Headers) -> str | None:
    value = headers.get(MSG_ID)
    return value if value else None


# ==================================================================================== outcome policy
#
# One policy for every publisher: ``js.publish`` (jssync, one reply at a time), ``publish_async``
# (:class:`PublishWindow`) and the bulk writer (:class:`FrameWindow`). Each of them keeps its own
# bookkeeping (a future per entry, a frame per token, a loop on the caller's thread) and asks
# the same two questions here: what does this reply mean (:func:`classify_reply`, which reads
# the status table), and what happens to the publish now (:class:`PublishPolicy`).

MAX_RETRY_WAIT: Final = 5.0
"""The longest wait between two re-sends of one publish (the backoff doubles up to it)."""

_PUBLISH: Final = _status.Context.PUBLISH
_RESEND: Final = Disposition.RESEND
_RESEND_WITH_MSG_ID: Final = Disposition.RESEND_WITH_MSG_ID
_IN_PROCESS: Final = Disposition.IN_PROCESS
_REFUSED: Final = Disposition.REFUSED
_PER_SUBJECT_LIMIT: Final = Disposition.PER_SUBJECT_LIMIT


class Reply(NamedTuple):
    """A reply to a publish, classified: ``ack`` when the message is stored (``ack.duplicate``:
    it was already), else the ``disposition`` of its status-table row and the typed ``error``."""

    ack: PubAck | None
    disposition: Disposition | None
    error: JetStreamError | None


def classify_reply(
    data: bytes, status: int | None, description: str | None = None, subject: str | None = None
) -> Reply:
    """What a reply to a publish says, from the status table (:mod:`jscore.status`).

    A status line without a body (the server's ``503`` no responders) is matched on its code
    and description; a body is decoded: a PubAck, or an API error matched on its err_code (or
    code) and description, or neither (malformed: a definite failure). ``subject`` only names
    the publish in error messages. The publishers call this for every reply that is not a plain
    PubAck (they decode those themselves, on their hot paths)."""
    what = "the publish" if subject is None else f"the publish to {subject!r}"
    if status is not None and not data:
        rule = _status.classify(_PUBLISH, status, description)
        error: JetStreamError
        if rule.error is NoStreamResponseError:
            error = NoStreamResponseError(f"no stream answered {what} (503 no responders)")
        else:
            error = JetStreamError(f"unexpected status {status} in reply to {what}")
        return Reply(None, rule.publish, error)
    try:
        ack = decode_ack(data)  # (a plain PubAck decodes on the fast path)
    except JetStreamAPIError as exc:
        rule = _status.classify_api_error(_PUBLISH, exc.err_code, exc.code, exc.description)
        return Reply(None, rule.publish, exc)
    except JetStreamError as exc:  # not a PubAck, not an API error
        return Reply(None, _REFUSED, exc)
    return Reply(ack, None, None)


class Trouble:
    """The re-send bookkeeping of one publish, created when something first goes wrong with it:
    ``since`` (when the trouble began: the first transient answer, or the send whose ack
    deadline passed; None until then), ``resends`` (re-sends so far: the backoff exponent) and
    ``maybe_stored`` (an earlier send may have been stored: it went out on a connection that
    was lost, its ack deadline passed, or the server said the msg id is "in process")."""

    __slots__ = ("since", "resends", "maybe_stored")

    def __init__(self, since: float | None = None, *, maybe_stored: bool = False) -> None:
        self.since = since
        self.resends = 0
        self.maybe_stored = maybe_stored

    def __repr__(self) -> str:
        return f"Trouble(since={self.since}, resends={self.resends}, maybe_stored={self.maybe_stored})"


class Decision(NamedTuple):
    """What happens to a publish: ``outcome`` PENDING means "send it again at ``at``"; otherwise
    it is settled with that outcome (ACKED, DUPLICATE, FAILED, UNKNOWN) and ``error``."""

    outcome: str
    error: BaseException | None
    at: float = 0.0


class PublishPolicy:
    """The publish-outcome policy, the same for ``js.publish``, ``publish_async`` and the bulk
    writer.

    A reply is **stored** or **duplicate** (a PubAck), a **definite failure** (nothing stored:
    the typed error), or **transient** (the table's RESEND, RESEND_WITH_MSG_ID, IN_PROCESS
    rows). No reply at all (an ack deadline, a lost connection) is **ambiguous**.

    Re-sending. A publish is sent again only where that cannot store it twice: with a msg id
    (the stream deduplicates), or, without one, after a reply that proves nobody took it (503
    no responders) and only if no earlier send may have been stored. Re-sends back off from
    ``retry_wait`` doubling up to :data:`MAX_RETRY_WAIT`, for at most ``budget`` seconds from
    the first trouble (``ack_timeout * (retries + 1)`` by default, :meth:`default_budget`); a
    missed ack deadline re-sends a publish with a msg id at once, within the same budget.

    Settling. A transient answer whose budget is spent settles as a definite failure with its
    error, except "in process" (10158), which stays ambiguous. Any definite failure of a
    publish that **may have been stored** by an earlier send (:class:`Trouble`) settles as
    ambiguous instead (:class:`PubAckTimeoutError`, chained from the server's error): the
    refusal may be the answer to the second copy of a message whose first copy is stored. With
    ``per_subject_dedup`` (the Spark writers' subject mode) a 10077 "maximum messages per
    subject exceeded" means "already written": a duplicate.

    While a publish waits for its re-send, only a PubAck settles it; other answers are replies
    to an earlier copy, and the re-send will be answered (the publishers implement that part).
    """

    __slots__ = ("budget", "retry_wait", "max_wait", "per_subject_dedup")

    def __init__(
        self,
        *,
        budget: float,
        retry_wait: float,
        max_wait: float = MAX_RETRY_WAIT,
        per_subject_dedup: bool = False,
    ) -> None:
        self.budget = float(budget)
        self.retry_wait = float(retry_wait)
        self.max_wait = float(max_wait)
        self.per_subject_dedup = per_subject_dedup

    @staticmethod
    def default_budget(ack_timeout: float, retries: int) -> float:
        """``ack_timeout * (retries + 1)``: the default re-send budget of every publisher."""
        return ack_timeout * (retries + 1)

    def __repr__(self) -> str:
        return (
            f"PublishPolicy(budget={self.budget}, retry_wait={self.retry_wait}, max_wait={self.max_wait}, "
            f"per_subject_dedup={self.per_subject_dedup})"
        )

    def backoff(self, resends: int) -> float:
        """The wait before re-send number ``resends + 1``."""
        return min(self.max_wait, self.retry_wait * (1 << min(resends, 8)))

    @staticmethod
    def resendable(disposition: Disposition | None, msg_id: bool) -> bool:
        """Whether an answer with this disposition may be followed by a re-send at all."""
        return disposition is _RESEND or (msg_id and (disposition is _RESEND_WITH_MSG_ID or disposition is _IN_PROCESS))

    def on_reply(
        self,
        trouble: Trouble,
        disposition: Disposition | None,
        error: BaseException | None,
        *,
        msg_id: bool,
        now: float,
        subject: str | None = None,
    ) -> Decision:
        """A reply that is not a PubAck (:func:`classify_reply`): re-send (PENDING, with the time)
        or settle. Updates ``trouble``."""
        if trouble.since is None:
            trouble.since = now
        if disposition is _IN_PROCESS:
            trouble.maybe_stored = True
        elif disposition is _PER_SUBJECT_LIMIT and self.per_subject_dedup:
            return Decision(DUPLICATE, None)
        if (
            self.resendable(disposition, msg_id)
            and (msg_id or not trouble.maybe_stored)
            and now - trouble.since < self.budget
        ):
            at = now + self.backoff(trouble.resends)
            trouble.resends += 1
            return Decision(PENDING, error, at)
        return self.give_up(trouble, disposition, error, subject)

    def give_up(
        self,
        trouble: Trouble,
        disposition: Disposition | None,
        error: BaseException | None,
        subject: str | None = None,
    ) -> Decision:
        """Settle after an answer that is not (or no longer) re-sent: FAILED with its error, or
        UNKNOWN (ambiguous) for "in process" and for anything that may have been stored."""
        if disposition is _IN_PROCESS:
            return Decision(UNKNOWN, error)  # DuplicateMsgIdInProcessError: ambiguous by itself
        if trouble.maybe_stored:
            return Decision(UNKNOWN, _ambiguous(error, subject))
        return Decision(FAILED, error)

    def on_no_answer(self, trouble: Trouble, *, msg_id: bool, sent_at: float, now: float) -> bool:
        """An ack deadline passed (the publish may have been stored; ``sent_at`` is when the send
        that got no answer went out). True: send it again now (it has a msg id and budget left);
        False: settle it as ambiguous. Updates ``trouble``."""
        if trouble.since is None:
            trouble.since = sent_at
        trouble.maybe_stored = True
        return msg_id and now - trouble.since < self.budget


def _ambiguous(error: BaseException | None, subject: str | None) -> PubAckTimeoutError:
    what = "the publish" if subject is None else f"the publish to {subject!r}"
    err = PubAckTimeoutError(
        f"a re-send of {what} was answered ({error}), but an earlier send may have been stored "
        "(its PubAck was lost): the message may or may not be stored"
    )
    err.__cause__ = error
    return err


# ==================================================================================== window


class PendingPublish:
    """One asynchronous publish: what was sent, where its ack goes, and how it ended.

    The transport may subclass it (jssync's ``PubAckFuture`` does) so that the entry IS the
    future: one object per publish. ``token``, ``gen`` and ``deadline`` are set by
    :meth:`PublishWindow.add`. The re-send bookkeeping (``trouble``, ``retry_at``, ``sends``)
    is rarely touched: class defaults, stored per entry only once it changes.
    """

    __slots__ = (
        "subject", "payload", "headers", "msg_id", "token", "gen", "deadline", "outcome", "ack", "error", "__dict__",
    )

    trouble: Trouble | None = None  # set at the first trouble (see PublishPolicy)
    retry_at: float = 0.0
    # No re-send is scheduled at or after this time: the policy gives up instead (a synchronous
    # publish sets its caller's deadline here).
    limit: float = math.inf
    # Someone waits for this entry (a thread, a callback): the publish machine hands it to the
    # shell as an event once it is settled. Unwatched entries settle silently (the common case
    # of publish_async: no event per ack).
    watched: bool = False
    sends: int = 1  # times the frame was handed to the transport

    @property
    def attempts(self) -> int:
        """Re-sends after a transient answer or a missed ack deadline."""
        return 0 if self.trouble is None else self.trouble.resends

    def __init__(self, subject: str, payload: bytes, headers: HeadersInput | None, msg_id: str | None) -> None:
        self.subject = subject
        self.payload = payload
        self.headers = headers
        self.msg_id = msg_id
        self.token = ""
        self.gen = 0
        self.deadline = 0.0
        self.outcome: str = PENDING
        self.ack: PubAck | None = None
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.subject!r} token={self.token} msg_id={self.msg_id!r} "
            f"outcome={self.outcome}>"
        )


class WindowStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a :class:`PublishWindow` (a snapshot; for tests, docs and monitoring)."""

    sent: int  # entries taken into the window (and not removed)
    acked: int
    duplicates: int
    failed: int  # definite failures (API errors, no stream)
    unknown: int  # ambiguous: timed out, lost with the connection, closed
    resent: int  # re-sent after a reconnect (had a msg id)
    retried: int  # re-sent after a transient answer or a missed ack deadline (PublishPolicy)
    late: int  # answers for tokens no longer in flight (settled, or the second copy of a frame)
    removed: int  # taken, then never sent (the transport refused the frame)


E = TypeVar("E", bound=PendingPublish)


class PublishWindow(Generic[E]):
    """The async-publish window: at most ``max_pending`` entries in flight.

    The caller owns the clock and the transport. It calls :meth:`add` before writing an entry's
    frame with the reply subject ``<its inbox prefix><entry.token>``, :meth:`receive_ack` for
    every message on that inbox, :meth:`handle_timeout` at :meth:`next_deadline`, and
    :meth:`connection_lost` / :meth:`reconnected` / :meth:`close` when the connection changes.
    Methods that settle entries return them (outcome, ack, error set); methods that want frames
    sent again return those entries, already re-armed, for the caller to write.

    Invariant: ``pending`` is in deadline order (every entry gets ``now + ack_timeout`` when it
    is (re)inserted, and a re-armed entry is re-inserted at the end), so expiry looks only at the
    front. Entries waiting for a retry are in ``retrying``; both count against the window.

    What an answer or a missed deadline does to an entry is :class:`PublishPolicy`'s decision
    (:attr:`policy`): re-sends within ``ack_timeout * (retry_attempts + 1)`` seconds of the
    first trouble (``transient_budget`` overrides it), backoff from ``retry_wait``.
    """

    def __init__(
        self,
        *,
        max_pending: int = 4000,
        ack_timeout: float = 5.0,
        retry_attempts: int = 2,
        retry_wait: float = 0.25,
        transient_budget: float | None = None,
    ) -> None:
        self.pending: dict[str, E] = {}
        self.retrying: dict[str, E] = {}
        self.max_pending = 1
        self.resume_level = 0
        self.ack_timeout = 1.0
        self.retry_attempts = 0
        self.retry_wait = 0.0
        self.transient_budget: float | None = None
        self.policy = PublishPolicy(budget=0.0, retry_wait=0.0)
        self.configure(
            max_pending=max_pending,
            ack_timeout=ack_timeout,
            retry_attempts=retry_attempts,
            retry_wait=retry_wait,
            transient_budget=transient_budget,
        )
        self.connected = True
        self.gen = 0  # the connection generation last handled (see the module docstring)
        self._tokens = map(str, itertools.count(1))
        # A fresh reply token, for a caller that builds its frame before :meth:`add` (a bound
        # C method: no Python frame on the hot path).
        self.next_token: Callable[[], str] = self._tokens.__next__
        self._acked = self._duplicates = self._failed = self._unknown = 0
        self._resent = self._retried = self._late = self._removed = 0

    def configure(
        self,
        *,
        max_pending: int | None = None,
        ack_timeout: float | None = None,
        retry_attempts: int | None = None,
        retry_wait: float | None = None,
        transient_budget: float | None = None,
    ) -> None:
        """Change settings; entries already in flight keep their deadlines. The re-send budget
        is ``ack_timeout * (retry_attempts + 1)`` unless ``transient_budget`` was given."""
        if max_pending is not None:
            if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
                raise InvalidOptionError(f"max_pending must be an int >= 1, got {max_pending!r}")
            self.max_pending = max_pending
            # A caller blocked on a full window is woken when the count falls to this level, not
            # at the first free slot: waking a blocked thread for every single ack costs more
            # than the ack itself. The window stays well filled (the server never runs dry).
            self.resume_level = max(max_pending * 3 // 4, max_pending - 256, 0)
        if ack_timeout is not None:
            if not isinstance(ack_timeout, (int, float)) or not math.isfinite(ack_timeout) or ack_timeout <= 0:
                raise InvalidOptionError(f"ack_timeout must be > 0 seconds, got {ack_timeout!r}")
            self.ack_timeout = float(ack_timeout)
        if retry_attempts is not None:
            if isinstance(retry_attempts, bool) or not isinstance(retry_attempts, int) or retry_attempts < 0:
                raise InvalidOptionError(f"retry_attempts must be an int >= 0, got {retry_attempts!r}")
            self.retry_attempts = retry_attempts
        if retry_wait is not None:
            if not isinstance(retry_wait, (int, float)) or not math.isfinite(retry_wait) or retry_wait < 0:
                raise InvalidOptionError(f"retry_wait must be >= 0 seconds, got {retry_wait!r}")
            self.retry_wait = float(retry_wait)
        if transient_budget is not None:
            if (
                isinstance(transient_budget, bool)
                or not isinstance(transient_budget, (int, float))
                or not math.isfinite(transient_budget)
                or transient_budget < 0
            ):
                raise InvalidOptionError(f"transient_budget must be >= 0 seconds, got {transient_budget!r}")
            self.transient_budget = float(transient_budget)
        budget = self.transient_budget
        if budget is None:
            budget = PublishPolicy.default_budget(self.ack_timeout, self.retry_attempts)
        self.policy = PublishPolicy(budget=budget, retry_wait=self.retry_wait)

    # ------------------------------------------------------------------ accounting

    def __len__(self) -> int:
        """Entries in flight (sent and not settled, or waiting for a retry)."""
        return len(self.pending) + len(self.retrying)

    @property
    def has_room(self) -> bool:
        return len(self.pending) + len(self.retrying) < self.max_pending

    @property
    def stats(self) -> WindowStats:
        done = self._acked + self._duplicates + self._failed + self._unknown
        return WindowStats(
            sent=done + len(self),
            acked=self._acked,
            duplicates=self._duplicates,
            failed=self._failed,
            unknown=self._unknown,
            resent=self._resent,
            retried=self._retried,
            late=self._late,
            removed=self._removed,
        )

    def add(self, entry: E, now: float, gen: int, token: str | None = None) -> str:
        """Take ``entry`` into the window; returns its reply token (``token`` if given, from
        :meth:`next_token`). The caller checks room first (this never refuses). Runs once per
        publish: kept lean."""
        if token is None:
            token = next(self._tokens)
        entry.token = token
        entry.gen = gen
        entry.deadline = now + self.ack_timeout
        self.pending[token] = entry
        return token

    def remove(self, token: str) -> E | None:
        """Forget an entry whose frame the transport refused (it was never sent)."""
        entry = self.pending.pop(token, None) or self.retrying.pop(token, None)
        if entry is not None:
            self._removed += 1
        return entry

    # ------------------------------------------------------------------ settling

    def _settle(self, entry: PendingPublish, outcome: str, ack: PubAck | None, error: BaseException | None) -> None:
        entry.outcome = outcome
        entry.ack = ack
        entry.error = error
        if outcome is ACKED:
            self._acked += 1
        elif outcome is DUPLICATE:
            self._duplicates += 1
        elif outcome is FAILED:
            self._failed += 1
        else:
            self._unknown += 1

    def receive_ack(self, token: str, data: bytes, status: int | None, now: float) -> E | None:
        """A message arrived on the ack inbox for ``token``.

        Returns the entry, settled, or still PENDING when a re-send was scheduled (the caller
        should make sure :meth:`handle_timeout` runs by ``retry_at``); None when the token is not
        in flight (a late answer after the entry was settled, or the second copy of a re-sent
        frame). An entry waiting for its re-send is settled by a PubAck (the answer to an earlier
        copy: it was stored after all) and ignores any other answer.
        """
        entry = self.pending.pop(token, None)
        if entry is None:
            return self._answer_while_waiting(token, data, status)
        if status is None and b'"error"' not in data and 0x5C not in data:  # the common case, inlined (see decode_ack)
            try:
                ack = _ack_decoder.decode(data)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                pass
            else:
                if ack.seq > 0 and ack.stream:
                    self._settle(entry, DUPLICATE if ack.duplicate else ACKED, ack, None)
                    return entry
        reply = classify_reply(data, status, None, entry.subject)
        if reply.ack is not None:
            self._settle(entry, DUPLICATE if reply.ack.duplicate else ACKED, reply.ack, None)
            return entry
        trouble = entry.trouble
        if trouble is None:
            trouble = entry.trouble = Trouble()
        decision = self.policy.on_reply(
            trouble, reply.disposition, reply.error, msg_id=entry.msg_id is not None, now=now, subject=entry.subject
        )
        if decision.outcome is PENDING and decision.at >= entry.limit:
            decision = self.policy.give_up(trouble, reply.disposition, reply.error, entry.subject)
        if decision.outcome is PENDING:
            entry.retry_at = decision.at
            self.retrying[token] = entry
        else:
            self._settle(entry, decision.outcome, None, decision.error)
        return entry

    def receive_puback(self, token: str, stream: str, seq: int, duplicate: bool) -> E | None:
        """The PubAck ``{stream, seq, duplicate}`` arrived for ``token`` (read in the
        connection's ack lane): the same as :meth:`receive_ack` with that PubAck's JSON."""
        ack = PubAck(stream=stream, seq=seq, duplicate=duplicate)
        entry = self.pending.pop(token, None)
        if entry is None:
            entry = self.retrying.pop(token, None)
            if entry is None:
                self._late += 1
                return None
            self._settle(entry, DUPLICATE if duplicate else ACKED, ack, None)  # an earlier copy was stored
            return entry
        entry.ack = ack
        if duplicate:
            entry.outcome = DUPLICATE
            self._duplicates += 1
        else:
            entry.outcome = ACKED
            self._acked += 1
        return entry

    def _answer_while_waiting(self, token: str, data: bytes, status: int | None) -> E | None:
        entry = self.retrying.get(token)
        if entry is not None and (status is None or data):
            ack = classify_reply(data, status).ack
            if ack is not None:  # an earlier copy was stored after all
                del self.retrying[token]
                self._settle(entry, DUPLICATE if ack.duplicate else ACKED, ack, None)
                return entry
        self._late += 1
        return None

    def fail(self, entry: E, error: BaseException) -> None:
        """Settle an entry as ambiguous because re-sending it failed in the transport."""
        self.pending.pop(entry.token, None)
        self.retrying.pop(entry.token, None)
        if entry.outcome is PENDING:
            self._settle(entry, UNKNOWN, None, error)

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> float | None:
        """The earliest retry or ack deadline (ack deadlines only while connected). Pure."""
        best: float | None = None
        if self.connected and self.pending:
            best = next(iter(self.pending.values())).deadline
        for entry in self.retrying.values():
            if best is None or entry.retry_at < best:
                best = entry.retry_at
        return best

    def handle_timeout(self, now: float, gen: int | None = None) -> tuple[list[E], list[E]]:
        """Returns ``(settled, resend)``: entries whose ack deadline passed and that are not sent
        again (ambiguous, :class:`PubAckTimeoutError`), and entries to send again now, already
        re-armed (with generation ``gen``, the one their frame will be written on): those whose
        re-send is due, and those with a msg id whose ack deadline passed while the policy's
        budget lasts. While disconnected no ack deadline fires: a reconnect decides."""
        settled: list[E] = []
        resend: list[E] = []
        if self.retrying:
            for token, entry in list(self.retrying.items()):
                if entry.retry_at <= now:
                    del self.retrying[token]
                    self._rearm(entry, now, gen)
                    self.pending[token] = entry
                    resend.append(entry)
        if self.connected:
            pending = self.pending
            policy = self.policy
            while pending:
                token, entry = next(iter(pending.items()))
                if entry.deadline > now:
                    break
                del pending[token]
                trouble = entry.trouble
                if trouble is None:
                    trouble = entry.trouble = Trouble()
                sent_at = entry.deadline - self.ack_timeout
                if policy.on_no_answer(trouble, msg_id=entry.msg_id is not None, sent_at=sent_at, now=now):
                    trouble.resends += 1
                    self._rearm(entry, now, gen)
                    pending[token] = entry  # (at the end: its deadline is the latest)
                    resend.append(entry)
                    continue
                self._settle(
                    entry,
                    UNKNOWN,
                    None,
                    PubAckTimeoutError(
                        f"no PubAck for the publish to {entry.subject!r} within {self.ack_timeout} s: "
                        "it may or may not be stored"
                    ),
                )
                settled.append(entry)
        return settled, resend

    def _rearm(self, entry: E, now: float, gen: int | None) -> None:
        entry.deadline = now + self.ack_timeout
        entry.sends += 1
        if gen is not None:
            entry.gen = gen
        self._retried += 1

    # ------------------------------------------------------------------ the connection

    def connection_lost(self, gen: int) -> list[E]:
        """The connection of generation ``gen`` is gone. Entries written to it without a msg id
        are ambiguous now (their ack cannot arrive any more) and are settled; those with one wait
        for the reconnect, which re-sends them. Ack deadlines stop until then."""
        self.connected = False
        settled: list[E] = []
        for token, entry in list(self.pending.items()):
            if entry.gen <= gen and entry.msg_id is None:
                del self.pending[token]
                self._settle(entry, UNKNOWN, None, _lost_error(entry))
                settled.append(entry)
        return settled

    def reconnected(self, gen: int, now: float) -> tuple[list[E], list[E]]:
        """Connection ``gen`` is up. Returns ``(settled, resend)``: entries written to an older
        connection fail if they have no msg id, and are re-armed for the caller to send again if
        they have one; every entry still in flight gets a fresh ack deadline."""
        self.connected = True
        self.gen = gen
        settled: list[E] = []
        resend: list[E] = []
        deadline = now + self.ack_timeout
        kept: dict[str, E] = {}
        for token, entry in self.pending.items():
            if entry.gen < gen:
                if entry.msg_id is None:
                    self._settle(entry, UNKNOWN, None, _lost_error(entry))
                    settled.append(entry)
                    continue
                entry.gen = gen
                entry.sends += 1
                trouble = entry.trouble
                if trouble is None:
                    entry.trouble = Trouble(maybe_stored=True)
                else:
                    trouble.maybe_stored = True  # written to a connection that is gone
                self._resent += 1
                resend.append(entry)
            entry.deadline = deadline
            kept[token] = entry
        self.pending = kept
        return settled, resend

    def close(self, error: BaseException | None) -> list[E]:
        """The connection is closed for good: every entry still in flight is ambiguous."""
        settled: list[E] = []
        for entries in (self.pending, self.retrying):
            for entry in entries.values():
                err = PubAckTimeoutError(
                    f"the connection closed before the PubAck for {entry.subject!r} arrived: "
                    "the message may or may not be stored"
                )
                if error is not None:
                    err.__cause__ = error
                self._settle(entry, UNKNOWN, None, err)
                settled.append(entry)
            entries.clear()
        return settled


def _lost_error(entry: PendingPublish) -> PubAckTimeoutError:
    return PubAckTimeoutError(
        f"the connection was lost before the PubAck for {entry.subject!r} arrived and the publish has "
        "no msg id to re-send it safely: it may or may not be stored"
    )


# ==================================================================================== frame window


# What a bulk writer keeps in flight at most, in bytes of frames (FrameWindow.max_bytes): the
# producer's buffer.memory of Kafka, 32 MiB, for the same reason (a bounded executor).
DEFAULT_MAX_PENDING_BYTES: Final = 32 * 1024 * 1024


class FrameWindow:
    """Bookkeeping of a bulk, idempotent publisher: every message carries a ``Nats-Msg-Id``, so
    whatever is ambiguous or transient (no PubAck in time, a lost connection, 503 no responders,
    10008, 10158 "in process") is answered by writing **the same frame** again, reply token
    included, and the stream deduplicates it. The Spark writers publish through it.

    Entries are complete frames keyed by an ``int`` token (the last token of their reply
    subject); nothing else is kept per message, and an ack costs a dict pop and one decode.
    Frames are written in batches: :meth:`sent` records one deadline per batch. What happens
    to a frame that got no PubAck in time or a reply other than a PubAck is
    :class:`PublishPolicy`'s decision (:attr:`policy`, the same as for ``js.publish`` and
    ``publish_async``): re-sent within ``transient_budget`` seconds (default
    ``ack_timeout * (retries + 1)``) of its first trouble, at once after a missed deadline,
    with backoff (``retry_wait`` doubling, at most 5 s) after a transient answer. The caller
    owns the transport, the lock and the clock; it calls :meth:`receive_ack` for every message
    on the reply inbox, :meth:`due` when :meth:`next_deadline` has passed, and
    :meth:`everything` after a reconnect. The first failure (definite, or ambiguous when an
    earlier copy may have been stored) is kept in :attr:`failure`; the caller stops there.
    Counters: ``written`` (stored, duplicates included), ``duplicates``, ``resent``.

    ``per_subject_dedup``: the refusal 10077 "maximum messages per subject exceeded" means
    "already written" (a ``discard_new_per_subject`` stream keyed by the msg id in the subject).

    Room: at most ``max_pending`` frames and ``max_bytes`` bytes of frames in flight
    (:attr:`bytes_in_flight`); :attr:`has_room` is False at either, so what a writer holds is
    bounded by ``max_bytes`` plus the batch it adds last, whatever the size of its messages.

    ``shared_replies``: the frames of one :meth:`sent` batch share one reply subject, whose
    token is the batch's first token (every frame's reply subject ends with it). nats-server
    pays for every distinct reply subject it answers (a lookup of its subscription, not cached
    when each subject is new); one per batch costs it about a sixth less per message.

    The batch is settled as a whole: each send of a frame is answered at most once (JetStream
    is the only responder on a stream's subjects), so once as many PubAcks (or, in subject
    mode, 10077) as the batch has frames have come on its token, every frame of it is stored.
    Whatever else happens to a batch (a transient answer, a missed deadline, a reconnect)
    re-sends **all** its frames, under a new token (:attr:`reply_prefix` + a number above
    every first token): answers to the old one are ignored from then on, so no answer is
    counted for the wrong send, and the frames that were stored come back as duplicates
    (within the stream's duplicate window; in subject mode as 10077). First tokens must go up
    from batch to batch. More answers on a token than its batch has frames (something else
    answers the writer's messages) fail the window, also after the batch was settled (the
    last :data:`_SETTLED_KEPT` batches are remembered). A definite refusal fails the window
    with the whole batch (:attr:`failed_tokens`): which of its frames was refused is not
    known.
    """

    __slots__ = (
        "frames",
        "max_pending",
        "max_bytes",
        "bytes_in_flight",
        "ack_timeout",
        "retries",
        "retry_wait",
        "wake_level",
        "per_subject_dedup",
        "written",
        "duplicates",
        "resent",
        "failure",
        "failed_tokens",
        "groups",
        "reply_prefix",
        "transient_budget",
        "policy",
        "_deadlines",
        "_retry",
        "_trouble",
        "_next_reply",
        "_last_first",
        "_settled",
    )

    def __init__(
        self,
        *,
        max_pending: int = 4000,
        ack_timeout: float = 30.0,
        retries: int = 5,
        retry_wait: float = 0.1,
        per_subject_dedup: bool = False,
        transient_budget: float | None = None,
        max_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        shared_replies: bool = False,
    ) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise InvalidOptionError(f"max_pending must be an int >= 1, got {max_pending!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise InvalidOptionError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
        for name, value in (("ack_timeout", ack_timeout), ("retry_wait", retry_wait)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidOptionError(f"{name} must be > 0 seconds, got {value!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidOptionError(f"retries must be an int >= 0, got {retries!r}")
        if transient_budget is not None and (
            isinstance(transient_budget, bool)
            or not isinstance(transient_budget, (int, float))
            or not math.isfinite(transient_budget)
            or transient_budget < 0
        ):
            raise InvalidOptionError(f"transient_budget must be >= 0 seconds, got {transient_budget!r}")
        self.frames: dict[int, bytes] = {}
        self.max_pending = max_pending
        self.max_bytes = max_bytes
        self.bytes_in_flight = 0
        self.ack_timeout = float(ack_timeout)
        self.retries = retries
        self.retry_wait = float(retry_wait)
        self.wake_level = -1  # receive_ack answers True once in_flight <= this (the caller sets it)
        self.per_subject_dedup = per_subject_dedup
        self.written = 0
        self.duplicates = 0
        self.resent = 0
        self.failure: BaseException | None = None
        self.failed_tokens: Sequence[int] = ()  # the failure's frames (a whole batch with shared_replies)
        # shared_replies: reply token -> the batch of frames answering on it; and reply_prefix,
        # what a frame's reply subject is before its token (the caller sets it)
        self.groups: dict[int, _Batch] | None = {} if shared_replies else None
        self.reply_prefix = b""
        self._next_reply = _RESEND_TOKENS
        self._last_first = -1
        self._settled: dict[int, Sequence[int]] = {}  # the last settled batches: token -> tokens
        self._deadlines: deque[tuple[float, Iterable[int]]] = deque()  # batches, oldest first
        self._retry: dict[int, float] = {}  # token -> not before (its frame stays in .frames)
        self._trouble: dict[int, Trouble] = {}  # tokens that met trouble (see PublishPolicy)
        if transient_budget is None:
            transient_budget = PublishPolicy.default_budget(self.ack_timeout, retries)
        self.transient_budget = float(transient_budget)
        self.policy = PublishPolicy(
            budget=self.transient_budget, retry_wait=self.retry_wait, per_subject_dedup=per_subject_dedup
        )

    @property
    def failed_token(self) -> int | None:
        """The token of the failure's (first) frame, or None."""
        return self.failed_tokens[0] if self.failed_tokens else None

    @property
    def in_flight(self) -> int:
        """Messages written (or waiting to be written again) and not settled."""
        return len(self.frames)

    @property
    def has_room(self) -> bool:
        return len(self.frames) < self.max_pending and self.bytes_in_flight < self.max_bytes

    def room_level(self) -> int:
        """When the window has no room: how many in flight to wait for before adding more
        (half of what is in flight, so refills come in large writes)."""
        return min(self.max_pending, len(self.frames)) // 2

    def sent(self, tokens: Sequence[int], frames: Sequence[bytes], now: float) -> None:
        """A batch of new frames was written (or queued for the next connection). With
        ``shared_replies`` their reply token is ``tokens[0]``."""
        groups = self.groups
        if groups is not None:
            if not tokens:
                return
            reply = tokens[0]
            # (a token used before may still get late answers: first tokens only go up)
            if not self._last_first < reply < _RESEND_TOKENS:
                raise ValueError(f"token {reply} is not a new batch's first token (the last was {self._last_first})")
            self._last_first = reply
            groups[reply] = _Batch(tokens)
            self._deadlines.append((now + self.ack_timeout, (reply,)))
        else:
            self._deadlines.append((now + self.ack_timeout, tokens))
        self.frames.update(zip(tokens, frames))
        self.bytes_in_flight += sum(map(len, frames))

    def receive_ack(self, token: int, data: bytes, status: int | None, now: float) -> bool:
        """A message on the reply inbox. True when the caller's waiting thread should look:
        the window went down to :attr:`wake_level`, a re-send was scheduled, or it failed."""
        if self.groups is not None:
            return self._batch_reply(token, data, status, now)
        if token not in self.frames:
            return False  # a late ack: the token was settled by the answer to another copy
        duplicate = _plain_puback(data, status)
        if duplicate is not None:
            return self._stored(token, duplicate)
        reply = classify_reply(data, status)
        if reply.ack is not None:
            return self._stored(token, reply.ack.duplicate)
        if token in self._retry:
            return False  # already scheduled: the answer to an earlier copy (the re-send will be answered)
        return self._trouble_with(token, reply, now, self._stored, self._fail)

    def _trouble_with(
        self,
        key: int,
        reply: Reply,
        now: float,
        stored: Callable[[int, bool], bool],
        fail: Callable[[int, BaseException, int], bool],
    ) -> bool:
        """An answer other than a PubAck for ``key`` (a frame's token, or a batch's): the
        policy schedules a re-send, counts it as already written, or fails it."""
        trouble = self._trouble.get(key)
        if trouble is None:
            trouble = self._trouble[key] = Trouble()
        decision = self.policy.on_reply(trouble, reply.disposition, reply.error, msg_id=True, now=now)
        if decision.outcome is PENDING:
            self._retry[key] = decision.at
            return True
        if decision.outcome is DUPLICATE:
            return stored(key, True)
        assert decision.error is not None
        return fail(key, decision.error, trouble.resends)

    def receive_puback(self, token: int, duplicate: bool) -> bool:
        """A PubAck for ``token`` read in the connection's ack lane: :meth:`receive_ack`'s
        common case."""
        if self.groups is not None:
            return self.receive_pubacks(token, 1, 1 if duplicate else 0)
        if token not in self.frames:
            return False  # late (see receive_ack)
        return self._stored(token, duplicate)

    def receive_pubacks(self, token: int, count: int, duplicates: int) -> bool:
        """With ``shared_replies``: ``count`` PubAcks on batch token ``token``, ``duplicates``
        of them for duplicates."""
        assert self.groups is not None
        batch = self.groups.get(token)
        if batch is None or token in self._retry:
            # late, or an answer to a send that is to be repeated; or too many (see _too_many)
            return batch is None and token in self._settled and self._too_many(token, self._settled[token])
        batch.answered += count
        batch.duplicates += duplicates
        if batch.answered < len(batch.tokens):
            return False
        if batch.answered > len(batch.tokens):
            return self._too_many(token, batch.tokens)
        return self._batch_stored(token, batch)

    def _too_many(self, reply: int, tokens: Sequence[int]) -> bool:
        """More answers on batch token ``reply`` than its send had frames: something besides
        the stream answers the writer's messages, and a count of answers no longer tells what
        is stored. The window fails (ambiguous) rather than trust it."""
        error = PubAckTimeoutError(
            f"more answers than messages on reply token {reply}: something besides the stream answers "
            "this writer's messages, so which of them are stored cannot be told"
        )
        return self._failed_first(error, tokens)

    def _failed_first(self, error: BaseException, tokens: Sequence[int], exhausted: int = 0, what: str = "frame") -> bool:
        """Keep ``error`` as the window's failure, with the frames it concerns, unless there is
        one already."""
        if self.failure is None:
            if exhausted:
                _add_note(error, f"(after {exhausted} re-sends of the same {what})")
            self.failure = error
            self.failed_tokens = tokens
        return True

    # -- shared replies: a batch answers on one token

    def _batch_reply(self, reply: int, data: bytes, status: int | None, now: float) -> bool:
        """receive_ack with shared_replies: ``reply`` is a batch's token."""
        assert self.groups is not None
        batch = self.groups.get(reply)
        if batch is None or reply in self._retry:
            # late, or the batch is to be sent again (its answers no longer count); or too many
            return batch is None and reply in self._settled and self._too_many(reply, self._settled[reply])
        duplicate = _plain_puback(data, status)
        if duplicate is not None:
            return self.receive_puback(reply, duplicate)
        answer = classify_reply(data, status)
        if answer.ack is not None:
            return self.receive_puback(reply, bool(answer.ack.duplicate))
        return self._trouble_with(reply, answer, now, self.receive_puback, self._batch_failed)

    def _batch_stored(self, reply: int, batch: _Batch) -> bool:
        assert self.groups is not None
        del self.groups[reply]
        settled = self._settled
        settled[reply] = batch.tokens
        if len(settled) > _SETTLED_KEPT:
            del settled[next(iter(settled))]
        if self._trouble:
            self._trouble.pop(reply, None)
        pop = self.frames.pop
        self.bytes_in_flight -= sum([len(pop(t)) for t in batch.tokens])
        self.written += len(batch.tokens)
        self.duplicates += batch.duplicates
        return len(self.frames) <= self.wake_level

    def _batch_failed(self, reply: int, error: BaseException, exhausted: int = 0) -> bool:
        assert self.groups is not None
        batch = self.groups.pop(reply)
        self._retry.pop(reply, None)
        self._trouble.pop(reply, None)
        pop = self.frames.pop
        self.bytes_in_flight -= sum([len(pop(t)) for t in batch.tokens])
        return self._failed_first(error, batch.tokens, exhausted, "frames")

    def _batch_again(self, reply: int) -> tuple[int, list[bytes]]:
        """The frames of batch ``reply`` to send again, under a new token (returned)."""
        groups = self.groups
        assert groups is not None
        batch = groups.pop(reply)
        new = self._next_reply
        self._next_reply = new + 1
        trouble = self._trouble.pop(reply, None)
        if trouble is not None:
            self._trouble[new] = trouble
        batch.answered = batch.duplicates = 0
        groups[new] = batch
        subject = self.reply_prefix + b"%d" % new
        frames = self.frames
        out = []
        grown = 0
        for t in batch.tokens:
            old = frames[t]
            frame = frames[t] = with_reply(old, subject)
            grown += len(frame) - len(old)
            out.append(frame)
        self.bytes_in_flight += grown
        self.resent += len(out)
        return new, out

    def _send_again(self, replies: list[int], now: float) -> list[bytes]:
        if not replies:
            return []
        out: list[bytes] = []
        news = []
        for reply in replies:
            new, frames = self._batch_again(reply)
            news.append(new)
            out += frames
        self._deadlines.append((now + self.ack_timeout, news))
        return out

    def _stored(self, token: int, duplicate: bool | None) -> bool:
        frames = self.frames
        self.bytes_in_flight -= len(frames.pop(token))
        if self._retry:
            self._retry.pop(token, None)
        if self._trouble:
            self._trouble.pop(token, None)
        self.written += 1
        if duplicate:
            self.duplicates += 1
        return len(frames) <= self.wake_level

    def _fail(self, token: int, error: BaseException, exhausted: int = 0) -> bool:
        frame = self.frames.pop(token, None)
        if frame is not None:
            self.bytes_in_flight -= len(frame)
        self._retry.pop(token, None)
        self._trouble.pop(token, None)
        return self._failed_first(error, (token,), exhausted)

    def next_deadline(self) -> float | None:
        """When :meth:`due` has something to do (a batch's ack deadline or a scheduled re-send)."""
        best: float | None = self._deadlines[0][0] if self._deadlines else None
        if self._retry:
            at = min(self._retry.values())
            if best is None or at < best:
                best = at
        return best

    def due(self, now: float) -> list[bytes]:
        """The frames to write again now: scheduled re-sends whose wait is over, and every
        frame of a batch whose ack deadline passed (ambiguous: maybe stored) while the policy's
        budget lasts; a frame past it fails the window (:attr:`failure`, ambiguous). With
        ``shared_replies``, whole batches, each under a new token."""
        if self.groups is not None:
            return self._send_again(self._due_keys(now, self.groups, self._batch_failed), now)
        frames = self.frames
        tokens = self._due_keys(now, frames, self._fail)
        if not tokens:
            return []
        self.resent += len(tokens)
        self._deadlines.append((now + self.ack_timeout, tokens))
        return [frames[t] for t in tokens]

    def _due_keys(self, now: float, live: Container[int], fail: Callable[[int, BaseException, int], bool]) -> list[int]:
        """What is to be sent again now (frame tokens, or batch tokens with shared replies):
        re-sends whose wait is over, then the unsettled keys of every passed deadline while the
        budget lasts (``fail`` the others)."""
        retry = self._retry
        keys: list[int] = []
        if retry:
            for key, at in list(retry.items()):
                if at <= now:
                    del retry[key]
                    if key in live:
                        keys.append(key)
        chosen = set(keys)
        deadlines = self._deadlines
        policy = self.policy
        while deadlines and deadlines[0][0] <= now:
            deadline, batch = deadlines.popleft()
            sent_at = deadline - self.ack_timeout
            for key in batch:
                if key in live and key not in retry and key not in chosen:
                    trouble = self._trouble.get(key)
                    if trouble is None:
                        trouble = self._trouble[key] = Trouble()
                    if not policy.on_no_answer(trouble, msg_id=True, sent_at=sent_at, now=now):
                        error = PubAckTimeoutError(
                            f"no PubAck within {self.ack_timeout:g} s: the message may or may not be stored"
                        )
                        fail(key, error, trouble.resends)
                        continue
                    trouble.resends += 1
                    keys.append(key)
                    chosen.add(key)
        return keys

    def _in_doubt(self, keys: Iterable[int]) -> None:
        """Each of ``keys`` may have been stored by a send whose answer is lost."""
        trouble = self._trouble
        for key in keys:
            t = trouble.get(key)
            if t is None:
                trouble[key] = Trouble(maybe_stored=True)
            else:
                t.maybe_stored = True

    def everything(self, now: float) -> list[bytes]:
        """After a reconnect: every frame in flight, in token order, to write again on the new
        connection (their acks may never come; each may have been stored); deadlines restart.
        Not counted against the re-send budget."""
        groups = self.groups
        if groups is not None:
            self._retry.clear()
            self._deadlines.clear()
            replies = sorted(groups, key=lambda r: groups[r].tokens[0])
            self._in_doubt(replies)
            return self._send_again(replies, now)
        frames = self.frames
        tokens = sorted(frames)
        self._retry.clear()
        self._deadlines.clear()
        self._in_doubt(tokens)
        if tokens:
            self._deadlines.append((now + self.ack_timeout, tokens))
            self.resent += len(tokens)
        return [frames[t] for t in tokens]


def _plain_puback(data: bytes, status: int | None) -> bool | None:
    """The common case of a reply to a publish, decoded on its own: a PubAck with no error, a
    stream and a sequence gives its ``duplicate`` flag; anything else None (the status table
    decides it)."""
    if status is not None:
        return None
    try:
        fields = _ack_fields_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if fields.error is None and fields.seq > 0 and fields.stream:
        return bool(fields.duplicate)
    return None


_SETTLED_KEPT: Final = 1024
"""Shared replies: how many settled batches are remembered, so that an answer too many on one
of them fails the window (more than a window of 4,000 frames holds batches of 64)."""

_RESEND_TOKENS: Final = 1 << 52
"""Shared replies: the tokens of batches sent again count up from here (first tokens, a
writer's row numbers, stay below it)."""


class _Batch:
    """Frames that share a reply token (FrameWindow's ``shared_replies``): their tokens, and the
    answers counted on the current token."""

    __slots__ = ("tokens", "answered", "duplicates")

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = tokens
        self.answered = 0
        self.duplicates = 0


def with_reply(frame: bytes, reply: bytes) -> bytes:
    """``frame`` (a ``PUB`` or ``HPUB`` with a reply subject) with ``reply`` as its reply subject."""
    end = frame.index(b"\r\n")
    words = frame[:end].split(b" ")
    if len(words) != (5 if words[0] == b"HPUB" else 4 if words[0] == b"PUB" else -1):
        raise ValueError(f"not a PUB or HPUB frame with a reply subject: {frame[:end][:80]!r}")
    words[2] = reply
    return b" ".join(words) + frame[end:]


def _add_note(error: BaseException, note: str) -> None:
    add = getattr(error, "add_note", None)
    if add is not None:
        add(note)
