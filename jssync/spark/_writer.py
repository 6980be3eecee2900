"""Publishing the rows of one Spark partition exactly once.

Every row goes through the JetStream async-publish window with a **msg id** that is the same on
every attempt of the task:

* deterministic: ``<write id>-<partition id>-<row index>``, where the write id is fixed on the
  driver before the job (:func:`make_write_id`, a streaming query id and batch id, or the user's
  ``run_id``), so a retried or speculative attempt of the task publishes the same ids; this needs
  a plan that gives a partition the same rows in the same order on every attempt;
* or taken from a column (``msgIdColumn``) when the plan is not deterministic.

Every ack is checked. A publish whose outcome is unknown (:class:`PubAckTimeoutError`), that found
no stream (503) or whose id was "in process" (10158) is sent again **with the same msg id**, up
to ``retries`` times with a growing back-off; a definite refusal fails the task. A task never
returns while one of its publishes is unacknowledged. With ``dedupeMode=subject`` the id is also
the last token of the subject (``<subject>.<id>``) on a ``discard_new_per_subject`` stream with
``max_msgs_per_subject=1``, and the refusal :class:`MaxMsgsPerSubjectError` means "already
written": exactly once with no time window.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
import warnings
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Final

from jscore.errors import (
    BadSubjectError,
    DuplicateMsgIdInProcessError,
    InvalidOptionError,
    JetStreamAPIError,
    MaxMsgsPerSubjectError,
    NatsError,
    NoRespondersError,
    PubAckTimeoutError,
    StoreFailedError,
    StreamNotFoundError,
    TimeoutError,
)
from jscore.protocol import check_publish_subject

from . import _cache
from ._config import NatsConfig, WriteOptions

if TYPE_CHECKING:
    from jssync.client import Client
    from jssync.jetstream import JetStream
    from jssync.publish import PubAckFuture

__all__ = [
    "WriteResult",
    "DuplicateWindowWarning",
    "ShortDuplicateWindowError",
    "PartitionWriter",
    "make_write_id",
    "msg_id",
    "write_rows",
    "write_partition",
    "check_duplicate_window",
]

_log = logging.getLogger("jssync.spark")
_monotonic = time.monotonic

_BACKOFF_FIRST: Final = 0.1  # seconds before the first re-send of a failed publish
_BACKOFF_MAX: Final = 5.0
_SETTLE_GRACE: Final = 30.0  # beyond ack_timeout, how long to wait for a future to settle
_TOKEN_BAD: Final = frozenset(" \t\r\n.*>")
_END: Final = object()


class DuplicateWindowWarning(UserWarning):
    """The stream's duplicate_window is shorter than the writer's ``minDuplicateWindow``: a task
    retried after the window has passed would store its rows twice."""


class ShortDuplicateWindowError(InvalidOptionError):
    """``failOnShortWindow``: the stream's duplicate_window is shorter than the minimum."""


@dataclass
class WriteResult:
    """What a partition write did. ``written`` counts every row confirmed stored, including
    ``duplicates`` (rows the stream already had: a retried task, a re-run); ``resent`` counts
    publishes sent again after a transient or ambiguous failure."""

    written: int = 0
    duplicates: int = 0
    resent: int = 0

    def __iadd__(self, other: WriteResult) -> WriteResult:
        self.written += other.written
        self.duplicates += other.duplicates
        self.resent += other.resent
        return self


# --------------------------------------------------------------------------- msg ids


def make_write_id() -> str:
    """A random write id (16 hex characters), made once on the driver before the job and
    shipped to the tasks inside the closure: every attempt of a task sees the same one."""
    return secrets.token_hex(8)


def msg_id(write_id: str, partition_id: int, row_index: int) -> str:
    """The deterministic msg id of row ``row_index`` of partition ``partition_id``:
    ``<write_id>-<partition_id>-<row_index>`` (also a valid subject token for subject mode)."""
    return f"{write_id}-{partition_id}-{row_index}"


def check_write_id(write_id: object, what: str = "run_id") -> str:
    """Validate a write id: a non-empty string usable as (part of) a subject token."""
    if not isinstance(write_id, str) or not write_id:
        raise InvalidOptionError(f"{what}: expected a non-empty string, got {write_id!r}")
    if any(c in _TOKEN_BAD for c in write_id) or len(write_id) > 200:
        raise InvalidOptionError(f"{what}: {write_id!r} must not contain '.', '*', '>' or whitespace (at most 200 characters)")
    return write_id


# --------------------------------------------------------------------------- rows


def _payload(value: object, column: str) -> bytes:
    if value is None:
        return b""
    if value.__class__ is bytes:
        return value  # type: ignore[return-value,unused-ignore]
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidOptionError(
        f"dataColumn: column {column!r} must be binary or string, got {type(value).__name__} "
        f"(cast it, e.g. to_json(struct(*)) or .cast('binary'))"
    )


def _headers(value: object, column: str) -> Any:
    """A Spark map (dict), Arrow's list of (key, value) pairs, or None -> headers input."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value:
            return None
        pairs: list[tuple[str, str]] = []
        for k, v in value.items():
            _add_header(pairs, k, v, column)
        return pairs or None
    if isinstance(value, (list, tuple)):
        pairs = []
        for item in value:
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise InvalidOptionError(f"headersColumn: column {column!r}: expected a map or (key, value) pairs, got {item!r}")
            _add_header(pairs, item[0], item[1], column)
        return pairs or None
    raise InvalidOptionError(
        f"headersColumn: column {column!r}: expected a map<string,string> or map<string,array<string>>, got {type(value).__name__}"
    )


def _add_header(pairs: list[tuple[str, str]], key: object, value: object, column: str) -> None:
    if not isinstance(key, str):
        raise InvalidOptionError(f"headersColumn: column {column!r}: header names must be strings, got {key!r}")
    if value is None:
        return
    if isinstance(value, str):
        pairs.append((key, value))
    elif isinstance(value, (list, tuple)):
        for v in value:
            if v is not None:
                pairs.append((key, str(v)))
    elif isinstance(value, (bytes, bytearray)):
        pairs.append((key, bytes(value).decode()))
    else:
        pairs.append((key, str(value)))


Extract = Callable[[Any], "tuple[object, object, object, object]"]


def _extractor(row: Any, options: WriteOptions) -> tuple[Extract, object]:
    """A fast accessor for rows shaped like ``row``, and a key telling whether a later row has
    the same shape: (data, subject, headers, msg id) raw values, None where absent."""
    d, s, h, m = options.data_column, options.subject_column, options.headers_column, options.msg_id_column
    fields = getattr(row, "__fields__", None)
    if isinstance(row, tuple) and fields is not None:  # pyspark.sql.Row
        names = list(fields)
        if d not in names:
            raise InvalidOptionError(f"dataColumn: the rows have no column {d!r} (columns: {names})")
        if m is not None and m not in names:
            raise InvalidOptionError(f"msgIdColumn: the rows have no column {m!r} (columns: {names})")
        di = names.index(d)
        si = names.index(s) if s in names else -1
        hi = names.index(h) if h in names else -1
        mi = names.index(m) if m is not None else -1

        def from_row(r: Any) -> tuple[object, object, object, object]:
            return (
                r[di],
                r[si] if si >= 0 else None,
                r[hi] if hi >= 0 else None,
                r[mi] if mi >= 0 else None,
            )

        return from_row, fields
    if isinstance(row, Mapping):
        if d not in row and not (s in row or h in row or (m is not None and m in row)):
            raise InvalidOptionError(f"dataColumn: the rows have no key {d!r} (keys: {list(row)[:20]})")

        def from_dict(r: Any) -> tuple[object, object, object, object]:
            get = r.get
            return get(d), get(s), get(h), get(m) if m is not None else None

        return from_dict, dict
    if isinstance(row, (tuple, list)):
        # A plain tuple: positional (data[, subject[, headers[, msg_id]]]).
        def from_tuple(r: Any) -> tuple[object, object, object, object]:
            n = len(r)
            return (
                r[0] if n > 0 else None,
                r[1] if n > 1 else None,
                r[2] if n > 2 else None,
                r[3] if n > 3 else None,
            )

        return from_tuple, tuple
    if isinstance(row, (bytes, bytearray, memoryview, str)):

        def from_scalar(r: Any) -> tuple[object, object, object, object]:
            return r, None, None, None

        return from_scalar, bytes
    raise InvalidOptionError(
        f"rows must be pyspark Rows, dicts, tuples (data, subject, headers, msg_id) or bytes/str, got {type(row).__name__}"
    )


def _shape(row: Any) -> object:
    fields = getattr(row, "__fields__", None)
    if isinstance(row, tuple) and fields is not None:
        return fields
    if isinstance(row, Mapping):
        return dict
    if isinstance(row, (tuple, list)):
        return tuple
    return bytes


# --------------------------------------------------------------------------- the duplicate window


def check_duplicate_window(client: Client, options: WriteOptions, *, stacklevel: int = 2) -> float | None:
    """Check the target stream before writing; returns its duplicate_window (seconds) or None
    when there is nothing to check.

    The stream is ``options.stream``, else the stream capturing ``options.subject`` (looked up;
    skipped when there is none or the lookup is not allowed). In msgid mode a window shorter than
    ``min_duplicate_window`` warns (:class:`DuplicateWindowWarning`) or, with
    ``fail_on_short_window``, raises :class:`ShortDuplicateWindowError`. In subject mode the
    stream must be ``discard=new``, ``discard_new_per_subject`` with ``max_msgs_per_subject=1``
    (else :class:`InvalidOptionError`: the per-subject refusal would not happen)."""
    js = client.jetstream()
    name = options.stream
    explicit = name is not None
    if name is None:
        if options.subject is None:
            return None
        probe = options.subject + (".x" if options.dedupe_mode == "subject" else "")
        try:
            name = js.stream_name_by_subject(probe)
        except (NatsError, OSError):
            _log.debug("jssync.spark: no stream found for %r; duplicate window not checked", probe, exc_info=True)
            return None
    try:
        info = js.stream_info(name)
    except StreamNotFoundError:
        if explicit:
            raise InvalidOptionError(f"stream: no stream named {name!r}") from None
        return None
    cfg = info.config
    window = float(cfg.duplicate_window) if cfg.duplicate_window is not None else 120.0
    if options.dedupe_mode == "subject":
        discard = getattr(cfg.discard, "value", cfg.discard)
        if not (cfg.discard_new_per_subject and cfg.max_msgs_per_subject == 1 and discard == "new"):
            raise InvalidOptionError(
                f"dedupeMode: 'subject' needs stream {name!r} to have discard='new', "
                f"discard_new_per_subject=True and max_msgs_per_subject=1 (it has discard={discard!r}, "
                f"discard_new_per_subject={cfg.discard_new_per_subject!r}, "
                f"max_msgs_per_subject={cfg.max_msgs_per_subject!r})"
            )
        return window
    if window < options.min_duplicate_window:
        message = (
            f"stream {name!r} has a duplicate_window of {window:g} s, shorter than minDuplicateWindow "
            f"({options.min_duplicate_window:g} s): a Spark task retried after {window:g} s would store "
            f"its rows twice. Raise the stream's duplicate_window, use dedupeMode=subject, or lower "
            f"minDuplicateWindow"
        )
        if options.fail_on_short_window:
            raise ShortDuplicateWindowError(f"failOnShortWindow: {message}")
        warnings.warn(message, DuplicateWindowWarning, stacklevel=stacklevel)
    return window


def ensure_checked(config: NatsConfig, client: Client, options: WriteOptions) -> None:
    """:func:`check_duplicate_window` once per cached connection and target (a task after the
    first in a worker process does not ask the server again). A failing check is not remembered."""
    key = ("dupwin", options.stream, options.subject, options.dedupe_mode, options.min_duplicate_window, options.fail_on_short_window)
    if key in _checked_keys(config):
        return
    check_duplicate_window(client, options, stacklevel=4)
    _cache.memo(config, key)


def _checked_keys(config: NatsConfig) -> frozenset[object]:
    st = _cache._current()
    with st.lock:
        entry = st.entries.get(config)
        return frozenset(entry.checked) if entry is not None else frozenset()


# --------------------------------------------------------------------------- publishing


class _Item:
    __slots__ = ("fut", "subject", "payload", "headers", "msg_id", "attempts", "not_before")

    def __init__(self, subject: str, payload: bytes, headers: Any, mid: str) -> None:
        self.fut: PubAckFuture | None = None
        self.subject = subject
        self.payload = payload
        self.headers = headers
        self.msg_id = mid
        self.attempts = 0
        self.not_before = 0.0


def _retryable(exc: BaseException) -> bool:
    """Transient or ambiguous: safe to send again with the same msg id."""
    if isinstance(exc, (PubAckTimeoutError, DuplicateMsgIdInProcessError, NoRespondersError, TimeoutError)):
        return True
    if isinstance(exc, StoreFailedError):  # 10077 limits: a retry gets the same answer
        return False
    if isinstance(exc, JetStreamAPIError):
        return exc.code == 503  # e.g. "JetStream system temporarily unavailable"
    return False


class PartitionWriter:
    """Publishes the rows of one partition attempt and settles every ack (used by every writer).

    ``add(row)`` publishes (blocking while ``max_pending`` publishes are in flight);
    ``finish()`` waits for every ack, re-sending what failed transiently, and returns the
    :class:`WriteResult`. Not thread-safe: one per task.
    """

    def __init__(
        self,
        js: JetStream,
        options: WriteOptions,
        *,
        write_id: str | None,
        partition_id: int,
        id_prefix: str | None = None,
    ) -> None:
        if options.msg_id_column is None:
            if write_id is None:
                raise InvalidOptionError(
                    "run_id: a write id fixed on the driver is needed for deterministic msg ids "
                    "(or set msgIdColumn to take them from a column)"
                )
            check_write_id(write_id, "run_id")
        self._js = js
        self._options = options
        self._subject_mode = options.dedupe_mode == "subject"
        self._fixed_subject = options.subject
        self._prefix = id_prefix if id_prefix is not None else f"{write_id}-{partition_id}-"
        self._pending: deque[_Item] = deque()
        self._retry: deque[_Item] = deque()
        self._max_pending = options.max_pending
        self._index = 0
        self._extract: Extract | None = None
        self._shape: object = None
        self.result = WriteResult()
        self._settle_wait = options.ack_timeout + _SETTLE_GRACE

    @property
    def rows_seen(self) -> int:
        return self._index

    @property
    def in_flight(self) -> int:
        return len(self._pending) + len(self._retry)

    # -- rows -> publishes

    def add(self, row: Any) -> None:
        opts = self._options
        extract = self._extract
        shape = _shape(row)
        if extract is None or (shape is not self._shape and shape != self._shape):
            extract, _ = _extractor(row, opts)
            self._extract = extract
        self._shape = shape
        data, subject, headers, mid = extract(row)
        index = self._index
        self._index = index + 1
        payload = _payload(data, opts.data_column)
        if opts.msg_id_column is not None:
            if mid is None or mid == "":
                raise InvalidOptionError(f"msgIdColumn: row {index} has no msg id in column {opts.msg_id_column!r}")
            mid = str(mid)
            if self._subject_mode and any(c in _TOKEN_BAD for c in mid):
                raise InvalidOptionError(
                    f"msgIdColumn: msg id {mid[:64]!r} (row {index}) cannot be a subject token in dedupeMode=subject "
                    f"(no '.', '*', '>' or whitespace)"
                )
        else:
            mid = self._prefix + str(index)
        subj = self._fixed_subject
        if subj is None:
            if subject is None or subject == "":
                raise InvalidOptionError(
                    f"subject: no subject option and row {index} has no value in column {opts.subject_column!r}"
                )
            subj = str(subject)
        if self._subject_mode:
            subj = f"{subj}.{mid}"
        try:
            check_publish_subject(subj, "subject")
        except BadSubjectError as exc:
            raise InvalidOptionError(f"subject: row {index}: {exc}") from None
        item = _Item(subj, payload, _headers(headers, opts.headers_column) if headers is not None else None, mid)
        self._make_room()
        self._send(item)

    def _make_room(self) -> None:
        pending = self._pending
        # Settle what is already done at the head (cheap), then block on the oldest while full.
        while pending and pending[0].fut is not None and pending[0].fut.done():
            self._settle(pending.popleft())
        while len(pending) >= self._max_pending:
            self._settle(pending.popleft())
        if self._retry:
            self._resend_due(_monotonic())

    def _send(self, item: _Item) -> None:
        try:
            item.fut = self._js.publish_async(
                item.subject,
                item.payload,
                headers=item.headers,
                msg_id=item.msg_id,
                timeout=self._options.ack_timeout,
            )
        except NatsError as exc:
            if not _retryable(exc):  # closed connection, max payload, bad header ...
                raise
            self._schedule_retry(item, exc)
            return
        self._pending.append(item)

    def _settle(self, item: _Item) -> None:
        """Wait for one publish (already sent) and account for it; failures are scheduled again."""
        fut = item.fut
        assert fut is not None
        try:
            ack = fut.result(self._settle_wait)
        except MaxMsgsPerSubjectError as exc:
            if self._subject_mode:
                self.result.written += 1
                self.result.duplicates += 1
                return
            raise _fail(item, exc) from exc
        except NatsError as exc:
            if not _retryable(exc):
                raise _fail(item, exc) from exc
            self._schedule_retry(item, exc)
            return
        self.result.written += 1
        if ack.duplicate:
            self.result.duplicates += 1

    def _schedule_retry(self, item: _Item, exc: BaseException) -> None:
        if item.attempts >= self._options.retries:
            raise _fail(item, exc, exhausted=True) from exc
        item.attempts += 1
        item.not_before = _monotonic() + min(_BACKOFF_MAX, _BACKOFF_FIRST * (2 ** (item.attempts - 1)))
        item.fut = None
        _log.info("jssync.spark: publish %s to %r failed (%s); sending it again (attempt %d)", item.msg_id, item.subject, exc, item.attempts)
        self._retry.append(item)

    def _resend_due(self, now: float) -> None:
        retry = self._retry
        for _ in range(len(retry)):
            item = retry.popleft()
            if item.not_before > now:
                retry.append(item)
                continue
            self.result.resent += 1
            while len(self._pending) >= self._max_pending:
                self._settle(self._pending.popleft())
            self._send(item)

    # -- the end of the partition

    def finish(self) -> WriteResult:
        """Wait until every publish of this writer is acknowledged (or re-sent and then
        acknowledged); raises the first definite failure, or the last error of a publish whose
        retries are exhausted."""
        pending, retry = self._pending, self._retry
        while pending or retry:
            if pending:
                self._settle(pending.popleft())
            if retry:
                now = _monotonic()
                if not pending:
                    wait = min(item.not_before for item in retry) - now
                    if wait > 0:
                        time.sleep(wait)
                        now = _monotonic()
                self._resend_due(now)
        return self.result


def _fail(item: _Item, exc: BaseException, *, exhausted: bool = False) -> NatsError:
    """The error that fails the task, naming the message; keeps the original's class."""
    if exhausted:
        note = f"publish of msg id {item.msg_id!r} to {item.subject!r} failed after {item.attempts} re-sends: {exc}"
    else:
        note = f"publish of msg id {item.msg_id!r} to {item.subject!r} failed: {exc}"
    if isinstance(exc, NatsError):
        try:
            exc.add_note(note)  # type: ignore[attr-defined]  # (3.11+)
        except AttributeError:
            pass
        return exc
    return NatsError(note)


# --------------------------------------------------------------------------- one partition


def write_partition(
    rows: Iterable[Any],
    config: NatsConfig,
    options: WriteOptions,
    *,
    write_id: str | None,
    partition_id: int,
) -> WriteResult:
    """Publish every row of one partition on this process's cached connection and return once
    every ack is in (:class:`WriteResult`). On any failure the cached client is closed and
    dropped (the task retry starts on a fresh connection) and the error propagates; the retry
    publishes the same msg ids, so what the failed attempt stored is deduplicated."""
    if not isinstance(partition_id, int) or isinstance(partition_id, bool) or partition_id < 0:
        raise InvalidOptionError(f"partition_id: expected an integer >= 0, got {partition_id!r}")
    if options.msg_id_column is None:
        if write_id is None:
            raise InvalidOptionError(
                "run_id: a write id fixed on the driver is needed for deterministic msg ids "
                "(or set msgIdColumn to take them from a column)"
            )
        check_write_id(write_id, "run_id")
    it = iter(rows)
    first = next(it, _END)
    if first is _END:  # an empty partition does not connect
        return WriteResult()
    rows = itertools.chain((first,), it)
    with _cache.lease(config) as client:
        try:
            ensure_checked(config, client, options)
            js = _cache.get_jetstream(config, max_pending=options.max_pending, ack_timeout=options.ack_timeout)
            writer = PartitionWriter(js, options, write_id=write_id, partition_id=partition_id)
            for row in rows:
                writer.add(row)
            return writer.finish()
        except BaseException:
            _cache.discard_client(config, client)
            raise


def write_rows(
    rows: Iterable[Any],
    config: NatsConfig,
    options: WriteOptions,
    *,
    write_id: str | None,
    partition_id: int,
) -> int:
    """:func:`write_partition`, returning the number of rows written (duplicates included)."""
    return write_partition(rows, config, options, write_id=write_id, partition_id=partition_id).written

