"""Publishing the rows of one Spark partition exactly once.

Every row becomes one ``HPUB`` frame with a **msg id** that is the same on every attempt of the
task, published through :class:`jssync.bulk.BulkPublisher` (batches of frames, every PubAck
checked on the I/O thread):

* deterministic: ``<write id>-<partition id>-<row index>``, where the write id is fixed on the
  driver before the job (:func:`make_write_id`, a streaming query id and batch id, or the user's
  ``run_id``), so a retried or speculative attempt of the task publishes the same ids; this needs
  a plan that gives a partition the same rows in the same order on every attempt;
* or taken from a column (``msgIdColumn``) when the plan is not deterministic.

Every ack is checked. A publish whose outcome is unknown (no PubAck within ``ack_timeout``, a
lost connection), that found no stream (503), no leader (10008) or whose id was "in process"
(10158) is sent again as **the same frame** (same msg id), within ``ack_timeout * (retries + 1)``
seconds of its first trouble (after an answer with a growing back-off), as
:class:`jscore.publish.PublishPolicy` decides for every publisher; a definite refusal fails the
task, and so does a publish still unconfirmed after that budget. A task never
returns while one of its publishes is unacknowledged. With ``dedupeMode=subject`` the id is also
the last token of the subject (``<subject>.<id>``) on a ``discard_new_per_subject`` stream with
``max_msgs_per_subject=1``, and the refusal :class:`MaxMsgsPerSubjectError` means "already
written": exactly once with no time window.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import secrets
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Final

from jscore.errors import (
    BadSubjectError,
    InvalidOptionError,
    MaxPayloadError,
    NatsError,
    NoStreamResponseError,
    StreamNotFoundError,
)
from jscore.jsapi import subject_matches
from jscore.headers import encode_headers
from jscore.protocol import MSG_ID_BLOCK_FMT, check_publish_subject, encode_hpub, msg_id_frame_encoder
from jscore.publish import check_msg_id, publish_headers
from jssync.bulk import BulkPublisher

from . import _cache
from ._config import NatsConfig, WriteOptions

if TYPE_CHECKING:
    from jssync.client import Client

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
    "check_targets",
    "check_captured",
]

_log = logging.getLogger("jssync.spark")

_BACKOFF_FIRST: Final = 0.1  # seconds before the first re-send of a failed publish
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


def check_targets(client: Client, options: WriteOptions, *, columns: bool = False, stacklevel: int = 2) -> WriteOptions:
    """Everything a write can check before it publishes, on the driver: that a stream captures
    the target subject(s) (``checkSubjects``), the stream's settings for ``dedupeMode=subject``
    and its duplicate window (:func:`check_duplicate_window`). Returns the options marked
    ``checked`` (the executors then skip the checks, so a warning is given once, here) and,
    with ``columns`` and no fixed subject, with ``captures``: the subject filters of the
    stream(s) a subject column's values must match (checked by the tasks before they publish).

    A subject no stream captures fails here at once with :class:`NoStreamResponseError` (a
    publish would be answered "no responders" until its retries run out). A ``stream`` option
    naming a stream that does not capture the subject is an :class:`InvalidOptionError`. When
    the account may not list streams the subject check is skipped (``checkSubjects=false``
    skips it too: a subject mapped by the account, or captured by a stream of another account
    through an import, is not visible here)."""
    js = client.jetstream()
    captures: tuple[str, ...] | None = None
    if options.check_subjects:
        if options.subject is not None:
            probe = options.subject + (".x" if options.dedupe_mode == "subject" else "")
            try:
                names = list(js.stream_names(subject=probe))
            except (NatsError, OSError):
                _log.debug("jssync.spark: cannot list streams; not checking that %r is captured", probe, exc_info=True)
                names = None
            if names is not None and not names:
                raise NoStreamResponseError(
                    f"subject: no stream captures {probe!r}: every publish would be answered 'no responders'. Create "
                    f"a stream whose subjects match it, or set checkSubjects=false when a stream captures it through "
                    f"an account mapping or import"
                )
            if names is not None and options.stream is not None and options.stream not in names:
                raise InvalidOptionError(
                    f"stream: stream {options.stream!r} does not capture subject {probe!r} (captured by "
                    f"{', '.join(repr(n) for n in names)})"
                )
        elif columns:
            captures = _captured_filters(js, options)
    check_duplicate_window(client, options, stacklevel=stacklevel + 1)
    return dataclasses.replace(options, checked=True, captures=captures)


def _captured_filters(js: Any, options: WriteOptions) -> tuple[str, ...] | None:
    """The subjects of ``options.stream``, or of every stream of the account (None when they
    cannot be listed)."""
    try:
        if options.stream is not None:
            infos = [js.stream_info(options.stream)]
        else:
            infos = list(js.streams())
    except StreamNotFoundError:
        raise InvalidOptionError(f"stream: no stream named {options.stream!r}") from None
    except (NatsError, OSError):
        _log.debug("jssync.spark: cannot list streams; subject column values are not checked", exc_info=True)
        return None
    filters = tuple(dict.fromkeys(f for info in infos for f in (info.config.subjects or ())))
    if not filters:
        where = f"stream {options.stream!r} has" if options.stream is not None else "the account's streams have"
        raise NoStreamResponseError(
            f"subjectColumn: {where} no subjects: no row of column {options.subject_column!r} could be stored "
            f"(checkSubjects=false skips this check)"
        )
    return filters


def check_captured(subjects: Iterable[object], options: WriteOptions, seen: set[str]) -> None:
    """Fail before publishing when a subject column value is captured by none of
    ``options.captures`` (``seen``: values already checked, updated)."""
    captures = options.captures
    if captures is None:
        return
    for subj in subjects:
        if subj is None or subj in seen or not isinstance(subj, str):
            continue
        probe = subj + (".x" if options.dedupe_mode == "subject" else "")
        if not any(subject_matches(probe, f) for f in captures):
            where = f"stream {options.stream!r}" if options.stream is not None else "any stream"
            raise NoStreamResponseError(
                f"subjectColumn: subject {probe!r} (column {options.subject_column!r}) is not captured by {where} "
                f"(subjects {list(captures)[:10]}); nothing was published for it"
            )
        if len(seen) < 100_000:
            seen.add(subj)


def ensure_checked(config: NatsConfig, client: Client, options: WriteOptions) -> None:
    """:func:`check_targets` once per cached connection and target (a task after the first in a
    worker process does not ask the server again); nothing when the driver checked already
    (``options.checked``). A failing check is not remembered."""
    if options.checked:
        return
    key = (
        "dupwin",
        options.stream,
        options.subject,
        options.dedupe_mode,
        options.min_duplicate_window,
        options.fail_on_short_window,
        options.check_subjects,
    )
    if key in _checked_keys(config):
        return
    check_targets(client, options, stacklevel=3)
    _cache.memo(config, key)


def _checked_keys(config: NatsConfig) -> frozenset[object]:
    st = _cache._current()
    with st.lock:
        entry = st.entries.get(config)
        return frozenset(entry.checked) if entry is not None else frozenset()


# --------------------------------------------------------------------------- publishing


_BATCH: Final = 64  # rows per hand-over to the bulk publisher (one lock, one write)
_tuple_item = tuple.__getitem__  # (pyspark's Row.__getitem__ is Python code; a Row is a tuple)

Build = Callable[[Any, int], bytes]


class PartitionWriter:
    """Publishes the rows of one partition attempt and settles every ack (used by every writer).

    ``add(row)`` (or ``add_all(rows)``) turns rows into ``HPUB`` frames carrying their msg id and
    hands them to a :class:`jssync.bulk.BulkPublisher` in batches (blocking while
    ``max_pending`` are in flight); ``finish()`` waits for every ack, re-sending what is
    ambiguous as the same frame, and returns the :class:`WriteResult`; ``close()`` drops the
    reply inbox (``finish`` does it too). Not thread-safe: one per task.
    """

    def __init__(
        self,
        client: Client,
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
        self._options = options
        self._subject_mode = options.dedupe_mode == "subject"
        self._fixed_subject = options.subject
        self._prefix = id_prefix if id_prefix is not None else f"{write_id}-{partition_id}-"
        self._bulk = BulkPublisher(
            client,
            max_pending=options.max_pending,
            max_pending_bytes=options.max_pending_bytes,
            ack_timeout=options.ack_timeout,
            retries=options.retries,
            retry_wait=_BACKOFF_FIRST,
            per_subject_dedup=self._subject_mode,
            shared_replies=True,
        )
        self._reply = self._bulk.reply_prefix
        self._group = b"0"  # the reply token of the batch being built: its first row's index
        self._max_payload = self._bulk.max_payload
        self._batch: list[bytes] = []
        self._first = 0  # the token (row index) of the batch's first frame
        self._index = 0
        self._build: Build | None = None
        self._key: object = None
        self._extract: Extract | None = None
        self._shape: object = None
        self.result = WriteResult()

    @property
    def rows_seen(self) -> int:
        return self._index

    @property
    def stored(self) -> int:
        """Rows confirmed stored so far (duplicates included)."""
        return int(self._bulk.window.written)

    @property
    def in_flight(self) -> int:
        return self._bulk.window.in_flight + len(self._batch)

    # -- rows -> frames

    def add(self, row: Any) -> None:
        build = self._build
        key = _key(row)
        if build is None or key is not self._key and key != self._key:
            build = self._builder(row)
        batch = self._batch
        batch.append(build(row, self._index))
        self._index += 1
        if len(batch) >= _BATCH:
            self._send()

    def add_all(self, rows: Iterable[Any]) -> None:
        """``add`` for every row (the same, with less interpreter work per row)."""
        batch = self._batch
        index = self._index
        build = self._build
        key = self._key
        try:
            for row in rows:
                k = _key(row)
                if build is None or k is not key and k != key:
                    build = self._builder(row)
                    key = self._key
                batch.append(build(row, index))
                index += 1
                if len(batch) >= _BATCH:
                    self._index = index
                    self._send()
                    batch = self._batch
        finally:
            self._index = index

    def _send(self) -> None:
        batch = self._batch
        first = self._first
        self._batch = []
        self._first = first + len(batch)
        self._group = b"%d" % self._first
        try:
            self._bulk.send(first, batch)
        except NatsError as exc:
            raise self._failed(exc) from None

    def _builder(self, row: Any) -> Build:
        """The frame builder for rows shaped like ``row``: a lean one for the common case (a
        fixed subject, msg ids from the write id, a Row, tuple or bytes), else the general one."""
        self._key = _key(row)
        opts = self._options
        fields = getattr(row, "__fields__", None)
        fast = opts.subject is not None and opts.msg_id_column is None and not self._subject_mode
        build: Build
        if fast and isinstance(row, tuple) and fields is not None and opts.data_column in fields:
            names = list(fields)
            di = names.index(opts.data_column)
            hi = names.index(opts.headers_column) if opts.headers_column in names else -1
            build = self._fast_builder(di, hi)
        elif fast and isinstance(row, (bytes, bytearray, memoryview, str)):
            build = self._fast_builder(-1, -1)
        else:
            self._extract, self._shape = _extractor(row, opts)
            build = self._frame
        self._build = build
        return build

    def _fast_builder(self, di: int, hi: int) -> Build:
        assert self._options.subject is not None
        try:
            subj = check_publish_subject(self._options.subject, "subject")
        except BadSubjectError as exc:
            raise InvalidOptionError(f"subject: {exc}") from None
        encode = msg_id_frame_encoder(subj, self._reply, self._prefix.encode(), self._max_payload, _too_big)
        general = self._frame
        column = self._options.data_column

        def build(row: Any, index: int) -> bytes:
            if di >= 0:
                data = _tuple_item(row, di)
                if hi >= 0 and _tuple_item(row, hi):
                    return general(row, index)  # this row has headers
            else:
                data = row
            if data.__class__ is not bytes:
                data = _payload(data, column)
            return encode(index, data, self._group)

        return build

    def _frame(self, row: Any, index: int) -> bytes:
        """The general builder: any row shape, subject and msg-id column, headers, subject mode."""
        opts = self._options
        shape = _shape(row)
        if self._extract is None or (shape is not self._shape and shape != self._shape):
            self._extract, self._shape = _extractor(row, opts)
        assert self._extract is not None
        data, subject, headers, mid = self._extract(row)
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
            try:
                check_msg_id(mid)
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"msgIdColumn: row {index}: {exc}") from None
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
            subj_b = check_publish_subject(subj, "subject")
        except BadSubjectError as exc:
            raise InvalidOptionError(f"subject: row {index}: {exc}") from None
        user = _headers(headers, opts.headers_column) if headers is not None else None
        if user is None:
            hdr = MSG_ID_BLOCK_FMT % mid.encode()
        else:
            merged, _ = publish_headers(user, msg_id=mid)
            assert merged is not None
            hdr = encode_headers(merged)
        size = len(hdr) + len(payload)
        if size > self._max_payload:
            raise _too_big(index, size, self._max_payload)
        return encode_hpub(subj_b, self._reply + self._group, hdr, payload)

    # -- the end of the partition

    def finish(self) -> WriteResult:
        """Wait until every publish of this writer is acknowledged (or re-sent and then
        acknowledged); raises the first definite failure, or the last error of a publish whose
        re-sends are exhausted. The reply inbox is dropped either way."""
        try:
            if self._batch:
                self._send()
            try:
                window = self._bulk.finish()
            except NatsError as exc:
                raise self._failed(exc) from None
            self.result = WriteResult(written=window.written, duplicates=window.duplicates, resent=window.resent)
            return self.result
        finally:
            self._bulk.close()

    def close(self) -> None:
        """Give up (the task failed): drop the reply inbox; what is in flight is not waited for."""
        self._batch = []
        self._bulk.close()

    def _failed(self, exc: NatsError) -> NatsError:
        window = self._bulk.window
        rows = window.failed_tokens
        if rows and exc is window.failure:
            # (the rows of one batch share their acks: which of them was refused is not known)
            lo, hi = rows[0], rows[-1]
            ids = self._options.msg_id_column is None
            what = f"row {lo}" + (f" (msg id {self._prefix + str(lo)!r})" if ids else "")
            if hi != lo:
                what = f"one of rows {lo}-{hi}" + (f" (msg ids {self._prefix + str(lo)!r} to {self._prefix + str(hi)!r})" if ids else "")
            _add_note(exc, f"publish of {what} failed: {exc}")
        return exc


def _key(row: Any) -> object:
    """What must stay the same for a frame builder to fit the next row."""
    fields = getattr(row, "__fields__", None)
    return fields if fields is not None else row.__class__


def _too_big(index: int, size: int, limit: int) -> MaxPayloadError:
    return MaxPayloadError(f"row {index}: msg id header + data = {size} bytes > the server's max_payload {limit}")


def _add_note(exc: BaseException, note: str) -> None:
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)


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
        writer: PartitionWriter | None = None
        try:
            ensure_checked(config, client, options)
            writer = PartitionWriter(client, options, write_id=write_id, partition_id=partition_id)
            try:
                writer.add_all(rows)
                return writer.finish()
            finally:
                writer.close()
        except BaseException as exc:
            if writer is not None:
                _log.warning(
                    "jetstream write %s partition %d failed (%s) after %d of its rows were confirmed stored "
                    "(%d sent); a retry publishes the same msg ids, so the stream keeps one copy of each",
                    write_id if write_id is not None else f"(ids from column {options.msg_id_column!r})",
                    partition_id,
                    type(exc).__name__,
                    writer.stored,
                    writer.rows_seen,
                )
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

