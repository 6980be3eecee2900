"""The key-value store on the blocking client (the ``nats kv`` layout; see :mod:`jscore.kv`).

A :class:`KeyValue` is a handle on one bucket (the stream ``KV_<bucket>``). Writes are
JetStream publishes on ``$KV.<bucket>.<key>`` (compare-and-set through
``Nats-Expected-Last-Subject-Sequence``); reads are direct gets when the bucket allows them
(any replica answers) and ``STREAM.MSG.GET`` otherwise; ``get_many`` is one batched direct get
(multi_last bounded by ``up_to_seq``: one consistent snapshot). Watchers, ``keys``, ``history``
and ``purge_deletes`` run a watcher (:mod:`jssync.watch`) whose deliveries go through the core's
:class:`jscore.kv.WatchState`. Every rule (keys, layout, entries, the "caught up" marker) is
the core's; this module only makes the calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from jscore import kv as K
from jscore.errors import (
    BucketNotFoundError,
    InvalidOptionError,
    KeyDeletedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    MsgNotFoundError,
    NoMessagesError,
    StreamNotFoundError,
    TooManySubjectsError,
    WrongLastSequenceError,
)
from jscore.kv import KeyValueEntry, KeyValueOp, KeyValueStatus, WatchOptions
from jscore.models import StreamInfo

from .stream import Stream
from .watch import Watcher

if TYPE_CHECKING:
    from jscore.kv import KeyValueFields

    from .jetstream import JetStream

__all__ = ["KeyValue", "KeyWatcher", "KeyValueEntry", "KeyValueOp", "KeyValueStatus"]

_monotonic: Final = time.monotonic

WatchCallback = Callable[[KeyValueEntry | None], Any]


def _cas_error(exc: WrongLastSequenceError, cls: type[KeyWrongLastSequenceError], key: str) -> KeyWrongLastSequenceError:
    return cls(exc.code, exc.err_code, f"{exc.description} (key {key!r})")


# =========================================================================== bucket management


def key_value_bucket(
    js: JetStream, bucket: str, action: str, timeout: float | None, fields: KeyValueFields
) -> KeyValue:
    """A bucket created, updated or either (``action``) from the fields of its configuration."""
    cfg = K.bucket_config(bucket, **fields)  # (the core checks and builds the bucket's options)
    return KeyValue(js, bucket, js._bucket_stream(cfg, action, bucket, timeout).cached_info)


def bind_key_value(js: JetStream, bucket: str, timeout: float | None) -> KeyValue:
    K.check_bucket(bucket)
    try:
        info = js.stream_info(K.stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError.of(exc, bucket) from exc
    return KeyValue(js, bucket, info)


def delete_key_value(js: JetStream, bucket: str, timeout: float | None) -> None:
    K.check_bucket(bucket)
    try:
        js.delete_stream(K.stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError.of(exc, bucket) from exc


def key_value_names(js: JetStream, timeout: float | None) -> Iterator[str]:
    for name in js.stream_names(f"{K.SUBJECT_PREFIX}*.>", timeout=timeout):
        if name.startswith(K.STREAM_PREFIX):
            yield name[len(K.STREAM_PREFIX):]


def key_values(js: JetStream, timeout: float | None) -> Iterator[KeyValueStatus]:
    for info in js.streams(f"{K.SUBJECT_PREFIX}*.>", timeout=timeout):
        name = info.config.name
        if name.startswith(K.STREAM_PREFIX):
            yield K.status_from_info(name[len(K.STREAM_PREFIX):], info)


# =========================================================================== the bucket


class KeyValue:
    """A handle on one bucket. Cheap; holds no server resources. Every call takes a
    ``timeout`` (default: the JetStream context's)."""

    def __init__(self, js: JetStream, bucket: str, info: StreamInfo) -> None:
        self._js = js
        self._bucket = bucket
        self._stream = Stream(js, info)
        self._direct = bool(info.config.allow_direct)

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def stream(self) -> Stream:
        """The bucket's stream."""
        return self._stream

    def __repr__(self) -> str:
        return f"<KeyValue {self._bucket!r}>"

    # ------------------------------------------------------------------ writes

    def put(self, key: str, value: bytes, *, timeout: float | None = None) -> int:
        """Store ``value`` under ``key``; returns the new revision."""
        subject = K.key_subject(self._bucket, key)
        return self._js.publish(subject, bytes(value), timeout=timeout).seq

    def update(self, key: str, value: bytes, *, last: int, timeout: float | None = None) -> int:
        """Store ``value`` only if the key's latest revision is ``last`` (0: the key has never
        had a message, or all were purged away); :class:`KeyWrongLastSequenceError`
        otherwise."""
        return self._cas(key, value, last, None, timeout, KeyWrongLastSequenceError)

    def _cas(
        self, key: str, value: bytes, last: int, ttl: float | None, timeout: float | None,
        cls: type[KeyWrongLastSequenceError],
    ) -> int:
        subject = K.key_subject(self._bucket, key)
        if isinstance(last, bool) or not isinstance(last, int) or last < 0:
            raise InvalidOptionError(f"last must be a revision (an int >= 0), not {last!r}")
        try:
            return self._js.publish(
                subject, bytes(value), timeout=timeout, expected_last_subject_seq=last, ttl=ttl
            ).seq
        except WrongLastSequenceError as exc:
            raise _cas_error(exc, cls, key) from exc

    def create(self, key: str, value: bytes, *, ttl: float | None = None, timeout: float | None = None) -> int:
        """Store ``value`` only if the key has no value (never written, deleted or purged);
        :class:`KeyExistsError` otherwise. ``ttl`` (seconds) needs a bucket made with
        ``limit_marker_ttl``."""
        try:
            return self._cas(key, value, 0, ttl, timeout, KeyExistsError)
        except KeyExistsError as first:
            # The key has messages: allowed when its latest one is a delete or purge marker.
            try:
                self._get(key, None, timeout, False)
            except KeyDeletedError as deleted:
                marker = deleted.entry
                assert isinstance(marker, KeyValueEntry)
                return self._cas(key, value, marker.revision, ttl, timeout, KeyExistsError)
            except KeyNotFoundError:
                raise first from None
            raise

    def delete(self, key: str, *, last: int | None = None, timeout: float | None = None) -> None:
        """Mark the key deleted (its history stays); ``last`` makes it a compare-and-set."""
        self._marker(key, "DEL", last, None, timeout)

    def purge(self, key: str, *, last: int | None = None, ttl: float | None = None, timeout: float | None = None) -> None:
        """Mark the key purged and drop its history (a rollup); ``ttl`` (seconds) lets the
        marker itself expire (needs a bucket made with ``limit_marker_ttl``)."""
        self._marker(key, "PURGE", last, ttl, timeout)

    def _marker(self, key: str, op: str, last: int | None, ttl: float | None, timeout: float | None) -> None:
        subject = K.key_subject(self._bucket, key)
        headers = {K.KV_OPERATION: op}
        if op == "PURGE":
            headers[K.KV_ROLLUP] = K.ROLLUP_SUBJECT
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise InvalidOptionError(f"last must be a revision (an int >= 0), not {last!r}")
        try:
            self._js.publish(subject, b"", headers=headers, timeout=timeout, expected_last_subject_seq=last, ttl=ttl)
        except WrongLastSequenceError as exc:
            raise _cas_error(exc, KeyWrongLastSequenceError, key) from exc

    # ------------------------------------------------------------------ reads

    def get(self, key: str, *, revision: int | None = None, timeout: float | None = None) -> KeyValueEntry:
        """The key's latest entry, or the one at ``revision``. :class:`KeyNotFoundError` when
        there is none (or ``revision`` is another key's); :class:`KeyDeletedError` (a
        KeyNotFoundError) when it is a delete or purge marker."""
        return self._get(key, revision, timeout, self._direct)

    def _get(self, key: str, revision: int | None, timeout: float | None, direct: bool) -> KeyValueEntry:
        subject = K.key_subject(self._bucket, key)
        if revision is not None and (isinstance(revision, bool) or not isinstance(revision, int) or revision < 1):
            raise InvalidOptionError(f"revision must be an int >= 1, not {revision!r}")
        try:
            if revision is None:
                msg = self._stream.get_msg(last_by_subject=subject, direct=direct, timeout=timeout)
            else:
                msg = self._stream.get_msg(revision, direct=direct, timeout=timeout)
        except MsgNotFoundError as exc:
            raise KeyNotFoundError(f"key {key!r} not found in bucket {self._bucket!r}") from exc
        if msg.subject != subject:
            raise KeyNotFoundError(f"revision {revision} is not one of key {key!r}")
        entry = K.entry_from_stored(self._bucket, msg.subject, msg.seq, msg.data, msg.headers, msg.time)
        if entry.operation is not KeyValueOp.PUT:
            raise KeyDeletedError(f"key {key!r} was deleted (revision {entry.revision})", entry)
        return entry

    def get_many(
        self, keys: str | Iterable[str], *, revision: int | None = None, timeout: float | None = None
    ) -> dict[str, KeyValueEntry]:
        """The latest entry of every key matching ``keys`` (keys or filters with ``*`` / ``>``),
        all read from ONE snapshot of the bucket: as of ``revision`` if given, else as of the
        first reply. Missing, deleted and purged keys are left out. Up to 1024 matching keys
        are one batched direct get; more (or a bucket without direct get) are read with an
        ordered consumer bounded by the same revision."""
        filters = [keys] if isinstance(keys, str) else list(keys)
        if not filters:
            return {}
        subjects = K.filter_subjects(self._bucket, filters)
        if revision is not None and (isinstance(revision, bool) or not isinstance(revision, int) or revision < 1):
            raise InvalidOptionError(f"revision must be an int >= 1, not {revision!r}")
        entries: list[KeyValueEntry] = []
        if self._direct:
            try:
                it = self._stream.direct_get_last_for(subjects, up_to_seq=revision, timeout=timeout)
                with it:
                    for m in it:
                        entries.append(K.entry_from_stored(self._bucket, m.subject, m.seq, m.data, m.headers, m.time))
                return K.snapshot_entries(self._bucket, entries)
            except TooManySubjectsError:
                entries = []  # more than 1024 matching keys: the consumer path below
        # Without direct get (or for more keys than one multi_last may match): every revision
        # up to the snapshot, through an ordered consumer.
        bound = revision if revision is not None else self._js.stream_info(self._stream.name, timeout=timeout).state.last_seq
        for e in self._collect(filters, WatchOptions(include_history=True), timeout):
            if e.revision <= bound:
                entries.append(e)
        return K.snapshot_entries(self._bucket, entries)

    def history(self, key: str, *, timeout: float | None = None) -> list[KeyValueEntry]:
        """Every stored revision of ``key``, oldest first (markers included);
        :class:`KeyNotFoundError` when there is none."""
        K.check_key(key)
        out = self._collect([key], WatchOptions(include_history=True), timeout)
        if not out:
            raise KeyNotFoundError(f"key {key!r} not found in bucket {self._bucket!r}")
        return out

    def keys(self, *filters: str, timeout: float | None = None) -> list[str]:
        """The keys that have a value (deleted and purged keys are left out), in stream order."""
        return list(self.list_keys(*filters, timeout=timeout))

    def list_keys(self, *filters: str, timeout: float | None = None) -> Iterator[str]:
        """The keys that have a value, as an iterator."""
        for f in filters:
            K.check_filter(f)
        entries = self._collect(list(filters), WatchOptions(ignore_deletes=True, meta_only=True), timeout)
        seen: dict[str, None] = {}
        for e in entries:
            seen.setdefault(e.key)
        return iter(list(seen))

    def _collect(self, filters: list[str], options: WatchOptions, timeout: float | None) -> list[KeyValueEntry]:
        """What a watcher delivers before its "caught up" marker."""
        t = timeout if timeout is not None else self._js.timeout
        out: list[KeyValueEntry] = []
        with KeyWatcher(self, filters, options) as w:
            deadline = _monotonic() + t
            while True:
                try:
                    e = w.next(max(0.0, deadline - _monotonic()))
                except NoMessagesError:
                    raise NoMessagesError(f"bucket {self._bucket!r} was not read within {t} s") from None
                if e is None:
                    return out
                out.append(e)

    # ------------------------------------------------------------------ watch

    def watch(
        self,
        *filters: str,
        include_history: bool = False,
        ignore_deletes: bool = False,
        meta_only: bool = False,
        updates_only: bool = False,
        callback: WatchCallback | None = None,
    ) -> KeyWatcher:
        """Watch the keys matching ``filters`` (all keys without). Delivers the latest entry of
        each key (every stored one with ``include_history``; none with ``updates_only``), then
        ``None`` once, then every later change, in order, across reconnects. ``meta_only``
        leaves values out. With ``callback`` it runs on a client thread (``watcher.stop()``
        ends it); without, iterate over the watcher or call ``watcher.next(timeout)``."""
        for f in filters:
            K.check_filter(f)
        options = WatchOptions(
            include_history=include_history, ignore_deletes=ignore_deletes, meta_only=meta_only,
            updates_only=updates_only,
        )
        return KeyWatcher(self, list(filters), options, callback)

    # ------------------------------------------------------------------ bucket

    def status(self, *, timeout: float | None = None) -> KeyValueStatus:
        info = self._js.stream_info(self._stream.name, timeout=timeout)
        return K.status_from_info(self._bucket, info)

    def purge_deletes(self, *, older_than: float | None = None, timeout: float | None = None) -> int:
        """Drop the history of deleted and purged keys: markers older than ``older_than``
        seconds (default 30 minutes; 0 or less: all) go too, younger ones stay so that watchers
        still see them. Returns how many keys were cleaned."""
        markers = [
            e for e in self._collect([], WatchOptions(), timeout) if e.operation is not KeyValueOp.PUT
        ]
        now = datetime.now(timezone.utc)
        for e in markers:
            keep = K.purge_keep(e, older_than, now)
            self._stream.purge(subject=K.key_subject(self._bucket, e.key), keep=keep or None, timeout=timeout)
        return len(markers)


class KeyWatcher(Watcher[KeyValueEntry]):
    """A running key-value watch: ``for entry in watcher`` (``None`` once when caught up), or
    ``watcher.next(timeout)``; with a callback, a client thread calls it instead. ``stop()``
    (or leaving a ``with`` block) ends it; the iteration then ends quietly. See
    :class:`jssync.watch.Watcher`."""

    _what = "key-value watch"

    def __init__(
        self, kv: KeyValue, filters: list[str], options: WatchOptions, callback: WatchCallback | None = None
    ) -> None:
        super().__init__(
            kv._js, kv.stream.name, K.filter_subjects(kv.bucket, filters), K.WatchState(kv.bucket, options),
            callback, kv.bucket,
        )
