"""Batched direct get (ADR-31): request bodies, the status table, and the reply machine.

Sans-IO like the rest of jscore. A batched direct get is a request on
``$JS.API.DIRECT.GET.<stream>`` whose reply subject (an inbox) then receives, without flow
control, one plain message per stored message and finally a zero-length ``NATS/1.0 204 EOB``
status carrying the cursor headers:

* ``Nats-Num-Pending``: how many matching messages are left after this batch;
* ``Nats-Last-Sequence``: the stream sequence of the last message sent (on each message: of the
  message sent before it in the same batch, 0 for the first);
* ``Nats-UpTo-Sequence`` (multi_last only): the sequence the results were read up to; later pages
  send it as ``up_to_seq`` so that the pages together form ONE point-in-time snapshot.

Two request forms:

* **batch** (:func:`batch_request`): up to ``batch`` messages (and ``max_bytes``) from ``seq``
  or ``start_time``, optionally only those on ``next_by_subject`` (wildcards allowed). One
  request; the caller resumes at :attr:`DirectGetBatch.next_seq` while ``num_pending`` > 0.
* **multi_last** (:func:`last_for_request`): the last message of every subject matching
  ``subjects`` (at most 1024 matching subjects: the server answers ``413`` beyond), optionally
  as of ``up_to_seq`` / ``up_to_time``, ``batch`` per reply. :class:`DirectGetBatch` pages on by
  itself: the next page asks from ``last seq + 1`` with ``up_to_seq`` = the first page's
  ``Nats-UpTo-Sequence``, until an EOB says nothing is pending.

:class:`DirectGetBatch` is the machine of one call: built with the validated options and
``now``, it queues the request(s) to send (:class:`DirectGetRequested`), is fed every reply with
:meth:`~DirectGetBatch.receive_msg`, and reports :class:`StoredMsgsDelivered` and finally one
:class:`DirectGetFinished` (``error`` None for a normal end). It never raises on server input:
a malformed reply, a lost reply (:class:`BatchGapError`, detected from the
``Nats-Last-Sequence`` chain), an old server (:class:`BatchGetUnsupportedError`), a status error
or the deadline (:class:`TimeoutError`) all end it with ``DirectGetFinished(error=...)``.
Each request (page) must reach its EOB within ``timeout`` seconds of being queued.

:data:`DIRECT_GET_STATUS_TABLE` (the direct-get rows of :mod:`jscore.status`) is the one place the
statuses are interpreted, for single gets (:func:`jscore.jsapi.stored_msg_from_direct`) and
batches alike; docs/conformance.md is generated from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Union

import msgspec

from . import status as _status
from .errors import (
    BatchGapError,
    BatchGetUnsupportedError,
    ConnectionLostError,
    DirectGetNoRespondersError,
    InvalidOptionError,
    JetStreamAPIError,
    JetStreamError,
    LocalProtocolError,
    MaxPayloadError,
    MsgNotFoundError,
    NatsError,
    TimeoutError,
)
from .headers import Headers
from .machine import ConnectionClosed, ConnectionLost, ConnectionRestored, Stop
from .protocol import DirectRepliesReceived, MsgReceived
from .jsapi import (
    StoredRow,
    _check_seq,
    _DirectGetRequest,
    check_filter_subject,
    stored_msg_and_cursor,
    stored_of_layout,
    stored_row_and_cursor,
)
from .models import StoredMsg, encode

__all__ = [
    "MAX_MULTI_LAST_SUBJECTS",
    "Disposition",
    "DirectStatusRule",
    "DIRECT_GET_STATUS_TABLE",
    "DISPOSITION_TEXT",
    "classify_direct_status",
    "direct_status_error",
    "BatchOptions",
    "LastForOptions",
    "resolve_batch",
    "resolve_last_for",
    "batch_request",
    "last_for_request",
    "BatchReply",
    "parse_batch_reply",
    "DirectGetRequested",
    "StoredMsgsDelivered",
    "DirectGetFinished",
    "DirectGetEvent",
    "DirectGetBatch",
    "DirectRange",
]

MAX_MULTI_LAST_SUBJECTS: Final = 1024
"""The server's limit on the subjects a multi_last request may MATCH (413 beyond). It is not
checked on the client: only the server knows how many subjects the filters match (nats-server
2.15.1 accepts 5000 literal filters of which three exist)."""

_MAX_COUNT: Final = 2**31 - 1  # batch must fit the server's int comfortably
_MAX_BYTES: Final = 2**63 - 1
_MAX_DIGITS: Final = 20  # 2**64 - 1 has 20 digits
_U64: Final = 2**64


# =========================================================================== the status table


# The rows live in jscore/status.py (one table for every status the client interprets); these
# names are the direct-get family's view of it.

Disposition = _status.Disposition
DirectStatusRule = _status.StatusRule
DISPOSITION_TEXT: Final = _status.DISPOSITION_TEXT

DIRECT_GET_STATUS_TABLE: Final[tuple[DirectStatusRule, ...]] = _status.rules(_status.Context.DIRECT_BATCH)
"""The direct-get rows of :data:`jscore.status.STATUS_TABLE`, in matching order (single gets and
batches read the same rows)."""

_BY_CODE: Final = _status.by_code(_status.Context.DIRECT_BATCH)
_UNKNOWN: Final = _status.catch_all(_status.Context.DIRECT_BATCH)


# The description of a status line that has none (as the single get always said).
_BARE_DESCRIPTION: Final = {404: "no message found", 408: "bad request", 413: "too many results"}


def classify_direct_status(code: int, description: str | None) -> DirectStatusRule:
    """The row of a status reply: the first row of ``code`` whose prefix starts ``description``
    (case-sensitive), else the catch-all row."""
    desc = description or ""
    for rule in _BY_CODE.get(code, ()):
        if desc.startswith(rule.description_prefix):
            return rule
    return _UNKNOWN


def direct_status_error(rule: DirectStatusRule, code: int, description: str | None) -> NatsError:
    """The error a status is reported as (a status that ends a request with an error)."""
    desc = description or ""
    cls = rule.error or JetStreamAPIError
    if issubclass(cls, JetStreamAPIError):
        bare = _BARE_DESCRIPTION.get(code, f"direct get failed with status {code}")
        return cls(code, rule.reports_err_code, desc or bare)
    if cls is DirectGetNoRespondersError:
        return DirectGetNoRespondersError(
            "direct get has no responders: the stream does not exist or does not allow direct get (allow_direct)"
        )
    return cls(f"direct get failed with status {code} {desc}".rstrip())  # pragma: no cover - no such row


# =========================================================================== requests


def _positive(name: str, value: object, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= value <= maximum:
        raise InvalidOptionError(f"{name} must be between 1 and {maximum}, got {value}")
    return value


def _check_time(name: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidOptionError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidOptionError(f"{name} must be timezone-aware, got {value!r}")
    return value


@dataclass(frozen=True)
class BatchOptions:
    """A validated batch request (:func:`resolve_batch`). ``seq`` is None only with ``start_time``."""

    seq: int | None
    next_by_subject: str | None
    start_time: datetime | None
    batch: int
    max_bytes: int | None

    def body(self) -> bytes:
        return encode(
            _DirectGetRequest(
                seq=self.seq,
                next_by_subj=self.next_by_subject,
                start_time=self.start_time,
                batch=self.batch,
                max_bytes=self.max_bytes,
            )
        )


@dataclass(frozen=True)
class LastForOptions:
    """A validated multi_last request (:func:`resolve_last_for`)."""

    subjects: tuple[str, ...]
    up_to_seq: int | None
    up_to_time: datetime | None
    batch: int | None

    def body(self, seq: int | None = None, up_to_seq: int | None = None) -> bytes:
        """The body of a page: the first one as given; a later one from ``seq`` (the cursor) up
        to ``up_to_seq`` (the first page's Nats-UpTo-Sequence, replacing ``up_to_time``)."""
        if up_to_seq is None:
            up_to_seq, up_to_time = self.up_to_seq, self.up_to_time
        else:
            up_to_time = None
        return encode(
            _DirectGetRequest(
                seq=seq,
                batch=self.batch,
                multi_last=list(self.subjects),
                up_to_seq=up_to_seq,
                up_to_time=up_to_time,
            )
        )


def resolve_batch(
    seq: int | None = None,
    *,
    next_by_subject: str | None = None,
    start_time: datetime | None = None,
    batch: int,
    max_bytes: int | None = None,
) -> BatchOptions:
    """Validate a batch request; :class:`InvalidOptionError` (or :class:`BadSubjectError` for
    ``next_by_subject``) before anything is sent. Without ``seq`` and ``start_time`` the batch
    starts at sequence 1; ``seq`` and ``start_time`` exclude each other (the server says 408)."""
    _positive("batch", batch, _MAX_COUNT)
    if max_bytes is not None:
        _positive("max_bytes", max_bytes, _MAX_BYTES)
    if seq is not None and start_time is not None:
        raise InvalidOptionError("give seq or start_time, not both")
    if start_time is not None:
        _check_time("start_time", start_time)
    elif seq is None:
        seq = 1
    else:
        _check_seq(seq)
    if next_by_subject is not None:
        check_filter_subject(next_by_subject, "next_by_subject")
    return BatchOptions(
        seq=seq, next_by_subject=next_by_subject, start_time=start_time, batch=batch, max_bytes=max_bytes
    )


def resolve_last_for(
    subjects: str | Sequence[str],
    *,
    up_to_seq: int | None = None,
    up_to_time: datetime | None = None,
    batch: int | None = None,
) -> LastForOptions:
    """Validate a multi_last request: ``subjects`` is one subject or a non-empty sequence of
    them (wildcards allowed, duplicates dropped, order kept); ``up_to_seq`` and ``up_to_time``
    exclude each other. The 1024-subject limit is the server's (413): it counts matches."""
    if isinstance(subjects, str):
        subjects = [subjects]
    if not isinstance(subjects, Sequence) or isinstance(subjects, (bytes, bytearray)):
        raise InvalidOptionError(f"subjects must be a str or a sequence of str, got {type(subjects).__name__}")
    if not subjects:
        raise InvalidOptionError("subjects must not be empty")
    unique: dict[str, None] = {}
    for subject in subjects:
        unique[check_filter_subject(subject, "subject")] = None
    if up_to_seq is not None and up_to_time is not None:
        raise InvalidOptionError("give up_to_seq or up_to_time, not both")
    if up_to_seq is not None:
        _check_seq(up_to_seq, "up_to_seq")
    if up_to_time is not None:
        _check_time("up_to_time", up_to_time)
    if batch is not None:
        _positive("batch", batch, _MAX_COUNT)
    return LastForOptions(subjects=tuple(unique), up_to_seq=up_to_seq, up_to_time=up_to_time, batch=batch)


def batch_request(
    seq: int | None = None,
    *,
    next_by_subject: str | None = None,
    start_time: datetime | None = None,
    batch: int,
    max_bytes: int | None = None,
) -> bytes:
    """The JSON body of a batch direct get (validated as :func:`resolve_batch` does)."""
    return resolve_batch(
        seq, next_by_subject=next_by_subject, start_time=start_time, batch=batch, max_bytes=max_bytes
    ).body()


def last_for_request(
    subjects: str | Sequence[str],
    *,
    up_to_seq: int | None = None,
    up_to_time: datetime | None = None,
    batch: int | None = None,
) -> bytes:
    """The JSON body of the first page of a multi_last direct get."""
    return resolve_last_for(subjects, up_to_seq=up_to_seq, up_to_time=up_to_time, batch=batch).body()


# =========================================================================== replies


def _number(value: str | None, name: str) -> int | None:
    """A cursor header's text as an int; None when absent. :class:`JetStreamError` if it is
    not a decimal number in 0 .. 2**64-1 (garbage is refused, never guessed at)."""
    if value is None:
        return None
    if value.isdigit() and value.isascii() and len(value) <= _MAX_DIGITS:
        number = int(value)
        if number < _U64:
            return number
    raise JetStreamError(f"invalid direct get reply: {name} {value[:32]!r}")


def _cursor(pending: str | None, last: str | None, up_to: str | None) -> tuple[int | None, int | None, int | None]:
    """The cursor headers' texts as numbers (each checked, in this order)."""
    return (
        _number(pending, "Nats-Num-Pending"),
        _number(last, "Nats-Last-Sequence"),
        _number(up_to, "Nats-UpTo-Sequence"),
    )


@dataclass(frozen=True)
class BatchReply:
    """One reply of a batched direct get, parsed: a message (``msg``) or an end of batch
    (``msg`` None), with its cursor headers (None where absent)."""

    msg: StoredMsg | None
    num_pending: int | None
    last_seq: int | None
    up_to_seq: int | None


def parse_batch_reply(headers: Headers | None, data: bytes) -> BatchReply:
    """Parse a user message (not a status) of a batch: the stored message (its Nats-* headers
    moved into the fields, as :func:`~jscore.jsapi.stored_msg_from_direct` does) and the cursor
    headers. :class:`JetStreamError` when a header is missing or malformed."""
    msg, texts = stored_msg_and_cursor(headers, data)
    num_pending, last_seq, up_to_seq = _cursor(*texts)
    return BatchReply(msg=msg, num_pending=num_pending, last_seq=last_seq, up_to_seq=up_to_seq)


def _parse_eob(headers: Headers | None) -> BatchReply:
    if headers is None:
        raise JetStreamError("invalid end of batch: no Nats-Num-Pending / Nats-Last-Sequence headers")
    num_pending, last_seq, up_to_seq = _cursor(
        headers.get("Nats-Num-Pending"), headers.get("Nats-Last-Sequence"), headers.get("Nats-UpTo-Sequence")
    )
    return BatchReply(msg=None, num_pending=num_pending, last_seq=last_seq, up_to_seq=up_to_seq)


# =========================================================================== events


class DirectGetRequested(msgspec.Struct, frozen=True):
    """Send ``body`` to ``subject`` with the call's inbox as the reply subject."""

    subject: str
    body: bytes
    page: int


class StoredMsgsDelivered(msgspec.Struct, frozen=True, gc=False):
    """Messages delivered in a row, in order: one event for a run of replies (those of one
    read, between two other events), not one per message. :class:`StoredMsg` objects, or
    :data:`StoredRow` tuples from a machine made with ``rows=True``."""

    msgs: list[Any]


class DirectGetFinished(msgspec.Struct, frozen=True):
    """The call is over: ``error`` None for a normal end; ``reason`` says which
    (``"eob"``, ``"empty"``, ``"stopped"``, ``"status"``, ``"timeout"``, ``"gap"``,
    ``"unsupported"``, ``"malformed"``)."""

    error: NatsError | None
    reason: str


DirectGetEvent = Union[DirectGetRequested, StoredMsgsDelivered, DirectGetFinished]


# =========================================================================== the machine


class DirectGetBatch:
    """The machine of one batched direct get call (a batch, or every page of a multi_last).

    Inputs: :meth:`receive_msg` (every message of the inbox), :meth:`handle_timeout`,
    :meth:`stop`. Outputs: :meth:`next_event` / :meth:`drain_events`, :meth:`next_deadline`
    (pure). Results once finished: :attr:`num_pending` (0 when nothing is left; for a multi_last
    always 0 after a complete snapshot), :attr:`last_seq`, :attr:`next_seq` (the cursor of a
    batch: where the next one should start), :attr:`up_to_seq` (the multi_last snapshot).
    With ``rows`` it delivers :data:`~jscore.jsapi.StoredRow` tuples instead of
    :class:`StoredMsg` objects (for bulk readers that build columns), checked the same way."""

    def __init__(
        self, subject: str, options: BatchOptions | LastForOptions, *, timeout: float, now: float, rows: bool = False
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            math.isfinite(timeout) and timeout > 0
        ):
            raise InvalidOptionError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._subject = subject
        self._options = options
        self._multi = isinstance(options, LastForOptions)
        self._timeout = float(timeout)
        self._events: list[DirectGetEvent] = []
        self._rows = rows  # deliver StoredRow tuples (stored_row_and_cursor), not StoredMsg
        self._run: list[Any] | None = None  # the messages of the last queued event, if it is one
        self._deadline: float | None = None
        self.done = False
        self.error: NatsError | None = None
        self.reason: str | None = None
        self.pages = 0
        self.delivered = 0
        self.num_pending: int | None = None
        self.last_seq: int | None = None
        self.up_to_seq: int | None = None
        self._page_prev = 0  # seq of the previous message in the current page (0: none yet)
        self._page_count = 0  # messages in the current page
        self._request(options.body(), now)

    # -- results ------------------------------------------------------------------------------

    @property
    def next_seq(self) -> int | None:
        """Where a following batch starts: the last delivered sequence + 1, else the request's
        own start (None when it started from a time and nothing came)."""
        if self.last_seq is not None:
            return self.last_seq + 1
        if isinstance(self._options, BatchOptions):
            return self._options.seq
        return None

    @property
    def timeout(self) -> float:
        return self._timeout

    # -- the contract ---------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When the current request times out (None once finished). Pure."""
        return None if self.done else self._deadline

    def next_event(self) -> DirectGetEvent | None:
        self._run = None  # (an event handed out is never added to)
        return self._events.pop(0) if self._events else None

    def drain_events(self) -> list[DirectGetEvent]:
        self._run = None
        events, self._events = self._events, []
        return events

    def handle_timeout(self, now: float) -> None:
        if self.done or self._deadline is None or now < self._deadline:
            return
        where = f"page {self.pages} of the multi_last" if self._multi else "the batch"
        self._finish(
            TimeoutError(
                f"direct get on {self._subject!r}: no end of batch (204 EOB) for {where} within "
                f"{self._timeout:g} s; {self.delivered} message(s) received"
                + (f", resume at seq {self.next_seq}" if not self._multi and self.next_seq is not None else "")
            ),
            "timeout",
        )

    @property
    def finished(self) -> bool:
        return self.done

    def check_request_size(self, max_payload: int) -> None:
        """Refuse (:class:`MaxPayloadError`) a first request larger than ``max_payload`` (a
        long multi_last subject list), before anything is sent."""
        for e in self._events:
            if isinstance(e, DirectGetRequested) and len(e.body) > max_payload:
                raise MaxPayloadError(f"direct get request of {len(e.body)} bytes > max_payload {max_payload}")

    def handle(self, command: object, now: float) -> None:
        """:class:`~jscore.machine.Stop` (the caller gave up: finish without an error), or a
        connection change: a lost or closed connection ends the call with the error (its
        replies went with the connection); a restored one changes nothing."""
        if self.done:
            return
        if isinstance(command, Stop):
            self._finish(None, "stopped")
        elif isinstance(command, ConnectionClosed) and isinstance(command.error, NatsError):
            self._finish(command.error, "connection closed")
        elif isinstance(command, (ConnectionLost, ConnectionClosed)):
            err = ConnectionLostError("the connection was lost during the direct get (its replies with it)")
            err.__cause__ = command.error
            self._finish(err, "connection lost")
        elif not isinstance(command, ConnectionRestored):
            raise LocalProtocolError(f"unknown command {command!r}")

    def stop(self, now: float) -> None:
        """Shorthand for ``handle(Stop(), now)``."""
        self.handle(Stop(), now)

    def receive(
        self, headers: Headers | None, data: bytes, status: int | None, description: str | None, now: float
    ) -> None:
        """:meth:`receive_msg` with the message's parts."""
        self.receive_msg(MsgReceived("", 0, None, data, headers, status, description), now)

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        """Feed one message of the inbox. Never raises for what the server sent."""
        if self.done:
            return  # late (after a timeout or stop): not delivered
        if msg.status is not None:
            self._on_status(msg.headers, msg.status, msg.description, now)
            return
        try:
            stored: StoredMsg | StoredRow
            if self._rows:
                stored, (pending, last, up_to) = stored_row_and_cursor(msg.headers, msg.data)
                seq = stored[1]
            else:
                stored, (pending, last, up_to) = stored_msg_and_cursor(msg.headers, msg.data)
                seq = stored.seq
            # (what _number decides, without its call for the common values: < 20 digits fit)
            if pending is not None and len(pending) < _MAX_DIGITS and pending.isdigit() and pending.isascii():
                num_pending: int | None = int(pending)
            else:
                num_pending = _number(pending, "Nats-Num-Pending")
            if last is not None and len(last) < _MAX_DIGITS and last.isdigit() and last.isascii():
                last_seq: int | None = int(last)
            else:
                last_seq = _number(last, "Nats-Last-Sequence")
            if up_to is not None:
                _number(up_to, "Nats-UpTo-Sequence")  # (checked as every cursor header is; an EOB's counts)
        except JetStreamError as exc:
            self._finish(exc, "malformed")
            return
        self._accept(stored, seq, num_pending, last_seq)

    def receive_direct(self, run: DirectRepliesReceived, now: float) -> None:
        """Feed a run of replies the connection's lane read (each what :meth:`receive_msg` makes
        of the same frame, in the server's exact form). Never raises for what the server sent."""
        rows = self._rows
        for stream, subject, seq, stamp, num_pending, last_seq, _up_to, own, data in run.replies:
            if self.done:
                return  # (ended by an earlier reply of the run: the rest is late)
            try:
                stored = stored_of_layout(stream, subject, seq, stamp, data, own, rows)
            except JetStreamError as exc:
                self._finish(exc, "malformed")
                return
            self._accept(stored, seq, num_pending, last_seq)

    def _accept(self, stored: StoredMsg | StoredRow, seq: int, num_pending: int | None, last_seq: int | None) -> None:
        """One reply read: check it continues the batch, then deliver it."""
        if num_pending is None:
            if self.delivered == 0 and self.pages == 1:
                self._finish(
                    BatchGetUnsupportedError(
                        "the server answered a batched direct get without Nats-Num-Pending: it does not "
                        "support batches (nats-server 2.11 or later does)"
                    ),
                    "unsupported",
                )
            else:
                self._finish(JetStreamError("invalid direct get batch reply: no Nats-Num-Pending"), "malformed")
            return
        if last_seq is None:
            self._finish(JetStreamError("invalid direct get batch reply: no Nats-Last-Sequence"), "malformed")
            return
        if last_seq != self._page_prev:
            self._finish(self._gap(f"message {seq} says the one before it was {last_seq}"), "gap")
            return
        if self.last_seq is not None and seq <= self.last_seq:
            self._finish(JetStreamError(f"invalid direct get batch reply: seq {seq} after {self.last_seq}"), "malformed")
            return
        self._page_prev = seq
        self._page_count += 1
        self.delivered += 1
        self.last_seq = seq
        if not self._multi:
            self.num_pending = num_pending
        run = self._run
        if run is None:
            run = self._run = []
            self._events.append(StoredMsgsDelivered(run))
        run.append(stored)

    # -- internals ------------------------------------------------------------------------------

    def _on_status(self, headers: Headers | None, status: int, description: str | None, now: float) -> None:
        rule = classify_direct_status(status, description)
        if rule.batch is Disposition.ERROR:
            self._finish(direct_status_error(rule, status, description), "status")
            return
        if rule.batch is Disposition.EMPTY:
            self.num_pending = 0
            self._finish(None, "empty")
            return
        try:
            eob = _parse_eob(headers)
        except JetStreamError as exc:
            self._finish(exc, "malformed")
            return
        if eob.num_pending is None or eob.last_seq is None:
            self._finish(
                JetStreamError("invalid end of batch: Nats-Num-Pending and Nats-Last-Sequence are required"),
                "malformed",
            )
            return
        if eob.last_seq != self._page_prev:
            self._finish(self._gap(f"the end of batch says the last message was {eob.last_seq}"), "gap")
            return
        self.num_pending = eob.num_pending
        if not self._multi:
            self._finish(None, "eob")
            return
        if self.up_to_seq is None:
            self.up_to_seq = eob.up_to_seq
        if eob.num_pending == 0:
            self._finish(None, "eob")
            return
        # More is pending: the next page, from the cursor, up to the first page's snapshot.
        if self.up_to_seq is None:
            self._finish(
                JetStreamError("invalid multi_last end of batch: Nats-UpTo-Sequence is missing, cannot page"),
                "malformed",
            )
            return
        if self._page_count == 0 or self.last_seq is None:
            self._finish(
                JetStreamError(
                    f"multi_last made no progress: an empty page with {eob.num_pending} message(s) pending"
                ),
                "malformed",
            )
            return
        assert isinstance(self._options, LastForOptions)
        self._request(self._options.body(self.last_seq + 1, self.up_to_seq), now)

    def _gap(self, what: str) -> BatchGapError:
        return BatchGapError(
            f"direct get on {self._subject!r} lost a reply: {what}, but {self._page_prev or 'none'} was received"
            f" ({self.delivered} message(s) delivered; resume at seq {self.next_seq})"
        )

    def _request(self, body: bytes, now: float) -> None:
        self.pages += 1
        self._page_prev = 0
        self._page_count = 0
        self._deadline = now + self._timeout
        self._run = None
        self._events.append(DirectGetRequested(self._subject, body, self.pages))

    def _finish(self, error: NatsError | None, reason: str) -> None:
        self.done = True
        self.error = error
        self.reason = reason
        self._deadline = None
        self._run = None
        self._events.append(DirectGetFinished(error, reason))


# =========================================================================== a range of sequences


class DirectRange:
    """Reading every stored message with a sequence in ``[start, end]`` (of one filter subject,
    if any) by batched direct gets, as a bulk reader does: which batch to ask for next, which
    replies to take, and when to stop trusting direct gets for the rest of the range.

    Direct gets may be answered by any server holding the stream (a replica) or by a mirror
    with ``mirror_direct``, and a replica may be behind the leader. So the plan takes replies
    only from the stream itself, in increasing sequence order, and it hands the rest of the
    range to the leader (:attr:`fallback`: read it with an ordered consumer) when a batch comes
    back empty, or says nothing is left, before the end (the leader then decides whether the
    end of the range was deleted or the responder was behind), or fails (:meth:`failed`).
    Reading the range again from :attr:`cursor` + 1 loses nothing and repeats nothing."""

    __slots__ = ("stream", "cursor", "end", "batch", "fallback", "done")

    def __init__(self, stream: str, start: int, end: int, batch: int) -> None:
        _positive("batch", batch, _MAX_COUNT)
        _check_seq(max(1, start))
        self.stream = stream
        self.cursor = max(1, start) - 1  # the last sequence taken
        self.end = end
        self.batch = batch
        self.fallback = False
        self.done = self.cursor >= end

    def request(self) -> tuple[int, int] | None:
        """``(seq, count)`` of the next batch to ask for; None when the plan is over (see
        :attr:`done` and :attr:`fallback`)."""
        if self.done or self.fallback:
            return None
        return self.cursor + 1, min(self.batch, self.end - self.cursor)

    def take(self, stream: str, seq: int) -> bool:
        """A reply of the current batch: True to take it (the cursor moves on); False to stop
        reading this batch, the plan having ended (past the end) or fallen back (a reply from
        another stream, or out of order)."""
        if stream != self.stream or seq <= self.cursor:
            self.fallback = True
            return False
        if seq > self.end:
            self.done = True
            return False
        self.cursor = seq
        if seq == self.end:
            self.done = True
        return True

    def failed(self) -> None:
        """The current batch failed (a timeout, no responders, a server that cannot batch, a
        permission): the rest of the range goes to the leader."""
        if not self.done:
            self.fallback = True

    def batch_ended(self, taken: int, num_pending: int | None) -> None:
        """The current batch ended (its EOB) after ``taken`` replies, with the server's count of
        matching messages left."""
        if self.done or self.fallback:
            return
        if taken == 0 or num_pending == 0:
            self.fallback = True
