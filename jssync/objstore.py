"""The object store on the blocking client (the layout of the ``nats`` CLI, nats.go and nats-py).

The layout, the documents and every check are :mod:`jscore.objstore`'s. This module reads the
caller's file object, hashes (``hashlib``), publishes the chunks with the context's async
publisher keeping a bounded number unacknowledged, and reads objects back through an ordered
consumer filtered on the object's chunk subject, one chunk at a time.

Memory: a put holds at most :func:`jscore.objstore.max_in_flight` chunks (about 4 MiB) whatever
the object's size; a get holds the ordered consumer's small buffer of chunks (about 4 MiB).
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import msgspec

from jscore import objstore as O
from jscore.errors import (
    BucketNotFoundError,
    BucketSealedError,
    DigestMismatchError,
    DirectGetNoRespondersError,
    InvalidOptionError,
    MsgNotFoundError,
    NoMessagesError,
    ObjectExistsError,
    ObjectNotFoundError,
    StreamNotFoundError,
    StreamSealedError,
    TimeoutError,
)
from jscore.headers import Headers
from jscore.models import DeliverPolicy, StoredMsg, StreamInfo
from jscore.objstore import ObjectInfo, ObjectLink, ObjectStoreStatus
from jscore.watch import WatchOptions

from .ordered import OrderedMessageStream
from .stream import Stream
from .watch import Watcher

if TYPE_CHECKING:
    from .jetstream import JetStream
    from .msg import JsMsg
    from .publish import PubAckFuture

__all__ = ["ObjectStore", "ObjectResult", "ObjectWatcher", "ObjectInfo", "ObjectLink", "ObjectStoreStatus"]

_UNSET: Final[Any] = object()
ObjectWatchCallback = Callable[[ObjectInfo | None], Any]
_rng_lock = threading.Lock()
_rng = random.Random(os.urandom(16))


def _nuid() -> str:
    with _rng_lock:
        return O.new_nuid(_rng)


def _headers_doc(headers: Any) -> dict[str, list[str]] | None:
    """Object headers as stored (Go's ``http.Header``: a list of values per key), checked by
    :class:`Headers` (typed error before anything is sent)."""
    if headers is None:
        return None
    h = headers if isinstance(headers, Headers) else Headers(headers)
    out: dict[str, list[str]] = {}
    for k, v in h.items():
        out.setdefault(k, []).append(v)
    return out or None


# =========================================================================== bucket management


def object_store_bucket(
    js: JetStream, bucket: str, action: str, timeout: float | None, fields: O.ObjectStoreFields
) -> ObjectStore:
    """A bucket created, updated or either (``action``) from the fields of its configuration."""
    cfg = O.bucket_config(bucket, **fields)
    return ObjectStore(js, bucket, js._bucket_stream(cfg, action, bucket, timeout))


def object_store(js: JetStream, bucket: str, *, timeout: float | None = None) -> ObjectStore:
    O.check_bucket(bucket)
    try:
        stream = js.stream(O.stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError.of(exc, bucket) from exc
    return ObjectStore(js, bucket, stream)


def delete_object_store(js: JetStream, bucket: str, *, timeout: float | None = None) -> None:
    O.check_bucket(bucket)
    try:
        js.delete_stream(O.stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError.of(exc, bucket) from exc


def object_store_names(js: JetStream, *, timeout: float | None = None) -> Iterator[str]:
    for name in js.stream_names(subject="$O.*.C.>", timeout=timeout):
        if name.startswith(O.STREAM_PREFIX):
            yield name[len(O.STREAM_PREFIX):]


def object_stores(js: JetStream, *, timeout: float | None = None) -> Iterator[ObjectStoreStatus]:
    for info in js.streams(subject="$O.*.C.>", timeout=timeout):
        name = info.config.name
        if name.startswith(O.STREAM_PREFIX):
            yield ObjectStoreStatus.from_stream_info(name[len(O.STREAM_PREFIX):], info)


# =========================================================================== the store


class ObjectStore:
    """A bucket of objects (``js.object_store(bucket)`` / ``js.create_object_store(bucket)``).

    Every method takes ``timeout`` (seconds, default: the JetStream context's), the longest
    wait for any one server answer (or chunk)."""

    def __init__(self, js: JetStream, bucket: str, stream: Stream) -> None:
        self._js = js
        self._bucket = bucket
        self._stream = stream

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def stream_name(self) -> str:
        return self._stream.name

    def __repr__(self) -> str:
        return f"<ObjectStore {self._bucket!r}>"

    def _timeout(self, timeout: float | None) -> float:
        return self._js.timeout if timeout is None else timeout

    # ------------------------------------------------------------------ reading metadata

    def _last_msg(self, subject: str, timeout: float | None) -> StoredMsg:
        """The last message on ``subject`` (wildcards allowed): by direct get when the bucket
        allows it, else (and when no direct-get responder answers: a deleted bucket, or one
        electing a leader) by the stream's API, whose answer tells which it is.
        :class:`MsgNotFoundError` when there is none, :class:`BucketNotFoundError`."""
        try:
            try:
                return self._stream.get_msg(last_by_subject=subject, timeout=timeout)
            except DirectGetNoRespondersError:
                return self._stream.get_msg(last_by_subject=subject, direct=False, timeout=timeout)
        except StreamNotFoundError as exc:
            raise BucketNotFoundError.of(exc, self._bucket) from exc

    def _info(self, name: str, *, show_deleted: bool, timeout: float | None) -> ObjectInfo:
        O.check_object_name(name)
        try:
            m = self._last_msg(O.meta_subject(self._bucket, name), timeout)
        except MsgNotFoundError:
            raise ObjectNotFoundError(f"object {name!r} not found in bucket {self._bucket!r}") from None
        info = O.decode_info(m.data, m.time)
        if info.deleted and not show_deleted:
            raise ObjectNotFoundError(f"object {name!r} was deleted from bucket {self._bucket!r}")
        return info

    def info(self, name: str, *, show_deleted: bool = False, timeout: float | None = None) -> ObjectInfo:
        """The metadata of ``name`` (:class:`ObjectNotFoundError`; a deleted object's marker
        with ``show_deleted``)."""
        return self._info(name, show_deleted=show_deleted, timeout=timeout)

    def _check_not_sealed(self) -> None:
        if self._stream.cached_info.config.sealed:
            raise BucketSealedError(f"bucket {self._bucket!r} is sealed")

    def _publish_meta(self, info: ObjectInfo, timeout: float | None) -> None:
        try:
            self._js.publish(
                O.meta_subject(self._bucket, info.name), O.encode_meta(info),
                headers=O.ROLLUP_HEADERS, timeout=timeout,
            )
        except StreamSealedError as exc:
            raise BucketSealedError(f"bucket {self._bucket!r} is sealed") from exc

    def _purge(self, subject: str, timeout: float | None) -> None:
        try:
            self._stream.purge(subject=subject, timeout=timeout)
        except StreamSealedError as exc:
            raise BucketSealedError(f"bucket {self._bucket!r} is sealed") from exc

    # ------------------------------------------------------------------ put

    def put(
        self,
        name: str,
        data: bytes | bytearray | memoryview | BinaryIO,
        *,
        description: str | None = None,
        headers: Mapping[str, str | Sequence[str]] | Headers | None = None,
        metadata: dict[str, str] | None = None,
        chunk_size: int = O.DEFAULT_CHUNK_SIZE,
        timeout: float | None = None,
    ) -> ObjectInfo:
        """Store ``data`` (bytes, or a binary file object read ``chunk_size`` bytes at a time)
        under ``name``, replacing any object of that name. Memory stays flat: about
        ``max_in_flight(chunk_size)`` chunks are held while unacknowledged. On any failure the
        chunks already sent are purged and the previous object (if any) stays."""
        O.check_object_name(name)
        max_payload = self._js.client.max_payload
        O.check_chunk_size(chunk_size, max_payload or None)
        hdrs = _headers_doc(headers)
        if description is not None and not isinstance(description, str):
            raise InvalidOptionError("description must be a str")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        ):
            raise InvalidOptionError("metadata must be a dict of str to str")
        if isinstance(data, (bytes, bytearray, memoryview)):
            view: memoryview | None = memoryview(data).cast("B")
            reader: Any = None
        elif callable(getattr(data, "read", None)):
            view, reader = None, data
        else:
            raise InvalidOptionError(f"data must be bytes or a binary file object, got {type(data).__name__}")
        self._check_not_sealed()
        timeout = self._timeout(timeout)
        previous: ObjectInfo | None
        try:
            previous = self._info(name, show_deleted=True, timeout=timeout)
        except ObjectNotFoundError:
            previous = None

        nuid = _nuid()
        subject = O.chunk_subject(self._bucket, nuid)
        progress = O.PutProgress(chunk_size)
        sha = hashlib.sha256()
        window = O.max_in_flight(chunk_size)
        in_flight: deque[PubAckFuture] = deque()
        publish_async = self._js.publish_async
        offset = 0
        try:
            while True:
                if view is not None:
                    chunk = bytes(view[offset:offset + chunk_size])
                    offset += len(chunk)
                else:
                    chunk = _read_full(reader, chunk_size)
                if not chunk:
                    break
                sha.update(chunk)
                progress.add(len(chunk))
                in_flight.append(publish_async(subject, chunk, timeout=timeout))
                del chunk
                while len(in_flight) >= window:
                    progress.stored(in_flight.popleft().result(timeout).seq)
            while in_flight:
                progress.stored(in_flight.popleft().result(timeout).seq)
            info = progress.info(
                name=name, bucket=self._bucket, nuid=nuid, sha256=sha.digest(),
                description=description, headers=hdrs, metadata=metadata,
            )
            self._publish_meta(info, timeout)
        except BaseException as exc:
            self._abandon(subject, in_flight, timeout)
            if isinstance(exc, StreamSealedError):
                raise BucketSealedError(f"bucket {self._bucket!r} is sealed") from exc
            raise
        if previous is not None and not previous.deleted and previous.nuid and previous.nuid != nuid:
            self._purge(O.chunk_subject(self._bucket, previous.nuid), timeout)
        return _with_mtime(info)

    def _abandon(self, subject: str, in_flight: deque[PubAckFuture], timeout: float) -> None:
        """After a failed put: let what is in flight settle (within one ``timeout`` in all),
        then purge the chunks sent."""
        deadline = time.monotonic() + timeout
        for f in in_flight:
            try:
                f.result(max(0.0, deadline - time.monotonic()))
            except BaseException:  # noqa: BLE001 - settling only
                pass
        try:
            self._stream.purge(subject=subject, timeout=timeout)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass

    # ------------------------------------------------------------------ get

    def get(self, name: str, *, show_deleted: bool = False, timeout: float | None = None) -> ObjectResult:
        """A streaming reader of ``name`` (links are followed): ``read(n)``, iteration over
        chunks, ``readinto``. The size, chunk count and digest are checked as it reads; a
        mismatch raises :class:`DigestMismatchError` in place of the last chunk."""
        timeout = self._timeout(timeout)
        info = self._info(name, show_deleted=show_deleted, timeout=timeout)
        link = info.link
        if link is not None:
            if link.name is None:
                raise InvalidOptionError(f"{name!r} links to the bucket {link.bucket!r}, not to an object")
            target = self if link.bucket == self._bucket else object_store(self._js, link.bucket, timeout=timeout)
            return target.get(link.name, timeout=timeout)
        return ObjectResult(self, info, timeout)

    def get_bytes(self, name: str, *, timeout: float | None = None) -> bytes:
        """The whole object in memory (digest checked)."""
        with self.get(name, timeout=timeout) as r:
            return r.read()

    # ------------------------------------------------------------------ changes

    def delete(self, name: str, *, timeout: float | None = None) -> None:
        """Delete ``name``: its metadata becomes a deleted marker and its chunks are purged."""
        self._check_not_sealed()
        info = self._info(name, show_deleted=True, timeout=timeout)
        self._publish_meta(O.deleted_marker(info), timeout)
        if info.nuid:
            self._purge(O.chunk_subject(self._bucket, info.nuid), timeout)

    def update_meta(
        self,
        name: str,
        *,
        new_name: str | None = None,
        description: str | None = _UNSET,
        headers: Mapping[str, str | Sequence[str]] | Headers | None = _UNSET,
        metadata: dict[str, str] | None = _UNSET,
        timeout: float | None = None,
    ) -> ObjectInfo:
        """Change the name, description, headers or metadata of ``name`` (fields not given are
        kept; the data is not touched). Renaming onto an existing object raises
        :class:`ObjectExistsError`; a deleted object :class:`ObjectNotFoundError`."""
        if new_name is not None:
            O.check_object_name(new_name)
        hdrs = _UNSET if headers is _UNSET else _headers_doc(headers)
        self._check_not_sealed()
        info = self._info(name, show_deleted=False, timeout=timeout)
        if new_name is not None and new_name != name:
            try:
                other = self._info(new_name, show_deleted=True, timeout=timeout)
            except ObjectNotFoundError:
                pass
            else:
                if not other.deleted:
                    raise ObjectExistsError(f"an object {new_name!r} exists in bucket {self._bucket!r}")
        changes: dict[str, Any] = {"mtime": None}
        if new_name is not None:
            changes["name"] = new_name
        if description is not _UNSET:
            changes["description"] = description
        if hdrs is not _UNSET:
            changes["headers"] = hdrs
        if metadata is not _UNSET:
            changes["metadata"] = metadata
        new = msgspec.structs.replace(info, **changes)
        self._publish_meta(new, timeout)
        if new.name != name:
            self._purge(O.meta_subject(self._bucket, name), timeout)
        return _with_mtime(new)

    def _add_link_info(self, name: str, link: ObjectLink, timeout: float | None) -> ObjectInfo:
        O.check_object_name(name)
        self._check_not_sealed()
        try:
            existing = self._info(name, show_deleted=True, timeout=timeout)
        except ObjectNotFoundError:
            pass
        else:
            if not existing.is_link and not existing.deleted:
                raise ObjectExistsError(f"an object {name!r} exists in bucket {self._bucket!r}")
        info = ObjectInfo(name=name, bucket=self._bucket, nuid=_nuid(), options=O.ObjectMetaOptions(link=link))
        self._publish_meta(info, timeout)
        return _with_mtime(info)

    def add_link(self, name: str, target: ObjectInfo | str, *, timeout: float | None = None) -> ObjectInfo:
        """A link ``name`` to an object: an :class:`ObjectInfo` (of this or another bucket) or
        the name of an object of this bucket. Links to links and to deleted objects are refused."""
        if isinstance(target, str):
            target = self._info(target, show_deleted=False, timeout=timeout)
        if not isinstance(target, ObjectInfo):
            raise InvalidOptionError("add_link needs an ObjectInfo or an object name")
        if target.deleted:
            raise InvalidOptionError(f"cannot link to the deleted object {target.name!r}")
        if target.is_link:
            raise InvalidOptionError(f"cannot link to the link {target.name!r}")
        return self._add_link_info(name, ObjectLink(bucket=target.bucket or self._bucket, name=target.name), timeout)

    def add_bucket_link(self, name: str, bucket: ObjectStore | str, *, timeout: float | None = None) -> ObjectInfo:
        """A link ``name`` to a whole bucket."""
        target = bucket.bucket if isinstance(bucket, ObjectStore) else O.check_bucket(bucket)
        return self._add_link_info(name, ObjectLink(bucket=target), timeout)

    def seal(self, *, timeout: float | None = None) -> None:
        """Seal the bucket: from now on it can be read, not changed (nor unsealed)."""
        try:
            info = self._stream.info(timeout=timeout)
        except StreamNotFoundError as exc:
            raise BucketNotFoundError.of(exc, self._bucket) from exc
        cfg = msgspec.structs.replace(info.config, sealed=True)
        self._stream = self._js.update_stream(cfg, timeout=timeout)

    def status(self, *, timeout: float | None = None) -> ObjectStoreStatus:
        """The bucket's status (size in bytes, sealed, TTL, storage ...)."""
        try:
            info: StreamInfo = self._stream.info(timeout=timeout)
        except StreamNotFoundError as exc:
            raise BucketNotFoundError.of(exc, self._bucket) from exc
        return ObjectStoreStatus.from_stream_info(self._bucket, info)

    # ------------------------------------------------------------------ list and watch

    def watch(
        self,
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        updates_only: bool = False,
        callback: ObjectWatchCallback | None = None,
        timeout: float | None = None,
    ) -> ObjectWatcher:
        """Watch the bucket's metadata: an :class:`ObjectInfo` per change (the latest of each
        object first; every stored one with ``include_history``; none with ``updates_only``),
        ``None`` once when the current objects are all delivered (at once for an empty bucket;
        never with ``updates_only``), then every later change in order, across reconnects.
        ``ignore_deletes`` leaves deleted markers out. With ``callback`` it runs on a client
        thread (``watcher.stop()`` ends it); without, iterate over the watcher or call
        ``watcher.next(timeout)``. ``timeout`` bounds each request that makes the consumer."""
        options = WatchOptions(
            include_history=include_history, ignore_deletes=ignore_deletes, updates_only=updates_only
        )
        return ObjectWatcher(self, options, callback, self._timeout(timeout))

    def list(self, *, show_deleted: bool = False, timeout: float | None = None) -> list[ObjectInfo]:
        """Every object of the bucket (``[]`` when empty), deleted ones with ``show_deleted``."""
        out: list[ObjectInfo] = []
        with self.watch(ignore_deletes=not show_deleted, timeout=timeout) as w:
            while True:
                item = w.next(self._timeout(timeout))
                if item is None:
                    return out
                out.append(item)


def _with_mtime(info: ObjectInfo) -> ObjectInfo:
    """What a change returns: the client's time of the change (the stored document carries a
    zero time; a later :meth:`ObjectStore.info` gives the server's)."""
    return msgspec.structs.replace(info, mtime=datetime.now(timezone.utc))


def _read_full(reader: Any, n: int) -> bytes:
    """Up to ``n`` bytes: fewer only at the end of the file (short reads are filled)."""
    first = reader.read(n)
    if first is None:
        raise InvalidOptionError("the file object returned None (non-blocking files are not supported)")
    if not isinstance(first, (bytes, bytearray)):
        raise InvalidOptionError("the file object must return bytes (open it in binary mode)")
    if len(first) == n or not first:
        return bytes(first)
    parts = [bytes(first)]
    got = len(first)
    while got < n:
        more = reader.read(n - got)
        if not more:
            break
        parts.append(bytes(more))
        got += len(more)
    return b"".join(parts)


# =========================================================================== reading an object


class ObjectResult:
    """A streaming reader of one object: ``read(n=-1)``, ``readinto(b)``, iteration over its
    chunks, a context manager. Chunks arrive through an ordered consumer on the object's chunk
    subject; each is checked against the metadata, and the last one only after the SHA-256
    digest matched (else :class:`DigestMismatchError`). Each wait for a chunk is bounded by
    ``timeout`` (:class:`TimeoutError`)."""

    def __init__(self, store: ObjectStore, info: ObjectInfo, timeout: float) -> None:
        self.info = info
        self._timeout = timeout
        self._check = O.ChunkReader(info)
        self._sha = hashlib.sha256()
        self._buf = b""
        self._pos = 0
        self._error: BaseException | None = None
        self._msgs: OrderedMessageStream | None = None
        if not self._check.done:
            window = O.max_in_flight(max(1, (info.options.max_chunk_size if info.options else 0) or O.DEFAULT_CHUNK_SIZE))
            oc = store._js.ordered_consumer(
                store.stream_name, filter_subjects=O.chunk_subject(store.bucket, info.nuid),
                deliver_policy=DeliverPolicy.ALL,
            )
            self._msgs = oc.messages(max_messages=window, expires=max(1.0, min(30.0, timeout)))
        elif info.digest is not None and not info.deleted:
            self._check.finish(hashlib.sha256().digest())  # an empty object: its digest too

    # -- chunks

    def _next_chunk(self) -> bytes | None:
        if self._error is not None:
            raise self._error
        msgs = self._msgs
        if msgs is None or self._check.done:
            return None
        try:
            msg: JsMsg = msgs.next(self._timeout)
            data = msg.data
            last = self._check.accept(len(data), msg.metadata.num_pending)
            self._sha.update(data)
            if last:
                self._check.finish(self._sha.digest())
                self._close()
            return data
        except NoMessagesError as exc:
            self._fail(TimeoutError(f"no chunk of object {self.info.name!r} within {self._timeout} s"), exc)
        except DigestMismatchError as exc:
            self._fail(exc, None)
        except BaseException as exc:
            self._fail(exc, None)
        raise AssertionError("unreachable")  # pragma: no cover

    def _fail(self, error: BaseException, cause: BaseException | None) -> None:
        if cause is not None:
            error.__cause__ = cause
        self._error = error
        self._close()
        raise error

    def __iter__(self) -> Iterator[bytes]:
        if self._buf[self._pos:]:
            rest, self._buf, self._pos = self._buf[self._pos:], b"", 0
            yield rest
        while True:
            chunk = self._next_chunk()
            if chunk is None:
                return
            yield chunk

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all the rest with ``n < 0``); ``b""`` at the end."""
        if n is None or n < 0:
            parts = [self._buf[self._pos:]]
            self._buf, self._pos = b"", 0
            parts.extend(iter(self._next_chunk, None))
            return b"".join(parts)
        pos, buf = self._pos, self._buf
        if len(buf) - pos >= n:
            self._pos = pos + n
            return buf[pos:pos + n]
        parts = [buf[pos:]]
        have = len(parts[0])
        self._buf, self._pos = b"", 0
        while have < n:
            chunk = self._next_chunk()
            if chunk is None:
                break
            need = n - have
            if len(chunk) > need:
                parts.append(chunk[:need])
                self._buf, self._pos = chunk, need
                break
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)

    def readinto(self, b: bytearray | memoryview) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def _close(self) -> None:
        msgs, self._msgs = self._msgs, None
        if msgs is not None:
            msgs.stop()

    def close(self) -> None:
        """Stop reading (the server consumer is deleted)."""
        self._close()

    def __del__(self) -> None:
        # A reader dropped mid-way. The garbage collector may run this on any thread, even
        # the I/O thread under the client lock: stop the consumer from a short-lived thread.
        msgs = getattr(self, "_msgs", None)
        if msgs is not None and not msgs.closed:
            threading.Thread(target=msgs.stop, name="jssync-object-reader-stop", daemon=True).start()

    def __enter__(self) -> ObjectResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def __repr__(self) -> str:
        return f"<ObjectResult {self.info.name!r} {self.info.size} bytes>"


# =========================================================================== watching


class ObjectWatcher(Watcher[ObjectInfo]):
    """Changes of a bucket's metadata, through an ordered consumer on ``$O.<bucket>.M.>``:
    ``for info in watcher`` (``None`` once when the initial objects are delivered),
    ``next(timeout)``, ``stop()``, a context manager; with a callback, a client thread calls
    it instead (``wait()`` after ``stop()``). See :class:`jssync.watch.Watcher`."""

    _what = "object-store watch"

    def __init__(
        self, store: ObjectStore, options: WatchOptions, callback: ObjectWatchCallback | None, timeout: float
    ) -> None:
        super().__init__(
            store._js, store.stream_name, [O.all_meta_subject(store.bucket)], O.ObjectWatchState(options),
            callback, store.bucket, request_timeout=timeout,
        )
