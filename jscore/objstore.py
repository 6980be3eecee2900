"""The object store's layout and decisions (the layout of the ``nats`` CLI, nats.go and nats-py).

A bucket ``B`` is the stream ``OBJ_B`` capturing ``$O.B.C.>`` (chunks) and ``$O.B.M.>``
(metadata). An object's bytes are the messages on ``$O.B.C.<nuid>``, in order; its metadata is
the last message on ``$O.B.M.<base64url(name)>`` (published with ``Nats-Rollup: sub`` so only
the latest stays), an :class:`ObjectInfo` JSON document with the object's size, chunk count
and ``SHA-256=<base64url>`` digest.

Pure: names and buckets are checked here, the stream config and the metadata documents are
built and read here, and the reader's decisions (is this chunk one too many? is the object
complete? does the digest match?) are made here. The hashing itself and every byte of I/O are
the shell's: it hands in the digest bytes it computed.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Any, Final, TypedDict

import msgspec

from .errors import (
    BadObjectMetaError,
    ChunkOrderError,
    DigestMismatchError,
    InvalidBucketNameError,
    InvalidObjectNameError,
    InvalidOptionError,
)
from .models import (
    Compression,
    DiscardPolicy,
    ObjectInfo,
    ObjectLink,
    ObjectMetaOptions,
    ObjectStoreStatus,
    Placement,
    StorageType,
    StreamConfig,
)
from .headers import Headers
from .models import check_placement
from .ordered import ChoiceSource
from .protocol import MAX_SUBJECT_BYTES
from .validate import check_bool
from .watch import WatchOptions, WatchState

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DIGEST_PREFIX",
    "ObjectLink",
    "ObjectMetaOptions",
    "ObjectInfo",
    "ObjectStoreStatus",
    "ChunkReader",
    "PutProgress",
    "check_bucket",
    "check_object_name",
    "check_chunk_size",
    "stream_name",
    "chunk_subject",
    "meta_subject",
    "all_chunks_subject",
    "all_meta_subject",
    "bucket_config",
    "ObjectStoreFields",
    "new_nuid",
    "digest_string",
    "digest_bytes",
    "check_digest",
    "encode_meta",
    "decode_info",
    "deleted_marker",
    "max_in_flight",
    "ObjectWatchState",
]

DEFAULT_CHUNK_SIZE: Final = 128 * 1024
DIGEST_PREFIX: Final = "SHA-256="
STREAM_PREFIX: Final = "OBJ_"
ROLLUP_HEADERS: Final = {"Nats-Rollup": "sub"}
# What a put keeps in flight (chunks published, not yet acknowledged): about this many bytes.
IN_FLIGHT_BYTES: Final = 4 * 1024 * 1024
# nats.go writes a zero time into the stored document; readers take the message's own time.
ZERO_TIME: Final = "0001-01-01T00:00:00Z"

_BUCKET_RE: Final = re.compile(r"[A-Za-z0-9_-]+")
_NUID_ALPHABET: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SHA256_LEN: Final = 32
_DIGEST_RE: Final = re.compile(r"(?i:SHA-256)=([A-Za-z0-9_-]{43})=?")
_TOKEN_RE: Final = re.compile(r"[^\s\x00-\x1f\x7f.]+")  # one literal subject token (no wildcard checked here)


# =========================================================================== names


def check_bucket(bucket: object) -> str:
    """The bucket name, or :class:`InvalidBucketNameError` (nats.go's rule: ``[A-Za-z0-9_-]+``)."""
    if not isinstance(bucket, str) or not _BUCKET_RE.fullmatch(bucket):
        raise InvalidBucketNameError(f"invalid bucket name {bucket!r}: use 1+ characters of A-Z a-z 0-9 _ -")
    return bucket


def check_object_name(name: object) -> str:
    """The object name, or :class:`InvalidObjectNameError`. Any non-empty string that has a
    UTF-8 form is a name (not one with a lone surrogate, as ``surrogateescape`` makes of an
    undecodable file name): it travels base64url-encoded in the subject."""
    if not isinstance(name, str) or not name:
        raise InvalidObjectNameError(f"invalid object name {name!r}: a non-empty string is needed")
    try:
        name.encode()
    except UnicodeEncodeError:
        raise InvalidObjectNameError(
            f"invalid object name {name[:64]!r}: it has no UTF-8 form (a lone surrogate)"
        ) from None
    return name


def check_chunk_size(chunk_size: object, max_payload: int | None = None) -> int:
    """A chunk size in bytes: an int ≥ 1, at most the server's ``max_payload`` when known."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidOptionError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if max_payload is not None and chunk_size > max_payload:
        raise InvalidOptionError(f"chunk_size {chunk_size} exceeds the server's max_payload {max_payload}")
    return chunk_size


def max_in_flight(chunk_size: int) -> int:
    """How many chunks a put keeps unacknowledged (memory: about ``IN_FLIGHT_BYTES``)."""
    return max(2, IN_FLIGHT_BYTES // chunk_size)


def stream_name(bucket: str) -> str:
    return STREAM_PREFIX + bucket


def encode_name(name: str) -> str:
    """The subject token of a name: base64url with padding (what nats.go and nats-py send)."""
    return base64.urlsafe_b64encode(name.encode()).decode()


def chunk_subject(bucket: str, nuid: str) -> str:
    return f"$O.{bucket}.C.{nuid}"


def meta_subject(bucket: str, name: str) -> str:
    """``$O.<bucket>.M.<base64url(name)>``; :class:`InvalidObjectNameError` for a name whose
    subject would be over the subject limit (about 1.3 KiB of UTF-8)."""
    subject = f"$O.{bucket}.M.{encode_name(check_object_name(name))}"
    if len(subject) > MAX_SUBJECT_BYTES:
        raise InvalidObjectNameError(
            f"object name too long: {len(name.encode())} bytes of UTF-8 make a {len(subject)}-byte subject, "
            f"over the {MAX_SUBJECT_BYTES}-byte limit"
        )
    return subject


def all_chunks_subject(bucket: str) -> str:
    return f"$O.{bucket}.C.>"


def all_meta_subject(bucket: str) -> str:
    return f"$O.{bucket}.M.>"


def new_nuid(rng: ChoiceSource) -> str:
    """A fresh 22-character id for an object's chunk subject (the NUID alphabet and length)."""
    return "".join(rng.choice(_NUID_ALPHABET) for _ in range(22))


def bucket_config(
    bucket: str,
    *,
    description: str | None = None,
    ttl: float | None = None,
    max_bytes: int | None = None,
    storage: StorageType | str = StorageType.FILE,
    replicas: int = 1,
    metadata: dict[str, str] | None = None,
    compression: bool = False,
    placement: Placement | None = None,
) -> StreamConfig:
    """The stream config of a bucket, as nats.go and nats-py make it."""
    check_bucket(bucket)
    check_bool(compression, "compression")
    check_placement(placement)
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl < 0):
        raise InvalidOptionError(f"ttl must be seconds ≥ 0, got {ttl!r}")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 5:
        raise InvalidOptionError(f"replicas must be 1 to 5, got {replicas!r}")
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)):
        raise InvalidOptionError(f"max_bytes must be an int, got {max_bytes!r}")
    try:
        storage = StorageType(storage)
    except ValueError:
        raise InvalidOptionError(f"storage must be file or memory, got {storage!r}") from None
    return StreamConfig(
        name=stream_name(bucket),
        description=description,
        subjects=[all_chunks_subject(bucket), all_meta_subject(bucket)],
        max_age=ttl if ttl else None,
        max_bytes=max_bytes if max_bytes else -1,
        storage=storage,
        num_replicas=replicas,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_direct=True,
        metadata=metadata,
        compression=Compression.S2 if compression else None,
        placement=placement,
    )


class ObjectStoreFields(TypedDict, total=False):
    """The keywords of a bucket's configuration (:func:`bucket_config`), for the typed
    ``**fields`` of ``create_object_store`` / ``update_object_store`` /
    ``create_or_update_object_store``."""

    description: str | None
    ttl: float | None
    max_bytes: int | None
    storage: StorageType | str
    replicas: int
    metadata: dict[str, str] | None
    compression: bool
    placement: Placement | None


# =========================================================================== documents


_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(dict[str, Any])


def encode_meta(info: ObjectInfo) -> bytes:
    """The stored document. Go's field rules: ``bucket``, ``nuid``, ``size``, ``mtime`` and
    ``chunks`` always present (mtime as a zero time: readers use the message's time), the rest
    only when set."""
    doc: dict[str, Any] = msgspec.to_builtins(info)
    doc["bucket"] = info.bucket
    doc["nuid"] = info.nuid
    doc["size"] = info.size
    doc["chunks"] = info.chunks
    doc["mtime"] = ZERO_TIME
    return _encoder.encode(doc)


def decode_info(data: bytes, mtime: datetime | None = None) -> ObjectInfo:
    """An ObjectInfo from a stored document; ``mtime`` (the message's time) replaces the
    stored one. Unknown fields are ignored; :class:`BadObjectMetaError` if it is not one."""
    try:
        doc = _decoder.decode(data)
        doc.pop("mtime", None)
        for key in ("description", "digest"):
            if doc.get(key) == "":
                doc.pop(key)
        hdrs = doc.get("headers")
        if isinstance(hdrs, dict):  # (a single string per key from some writers)
            doc["headers"] = {k: [v] if isinstance(v, str) else v for k, v in hdrs.items()}
        elif hdrs is not None and not hdrs:
            doc.pop("headers")
        if doc.get("options") is not None and isinstance(doc["options"], dict):
            opts = doc["options"]
            if opts.get("link") is None:
                opts.pop("link", None)
        info = msgspec.convert(doc, ObjectInfo)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError) as exc:
        raise BadObjectMetaError(f"invalid object metadata: {exc}") from exc
    problem = _unusable(info)
    if problem is not None:
        raise BadObjectMetaError(f"invalid object metadata: {problem}")
    return msgspec.structs.replace(info, mtime=mtime) if mtime is not None else info


def _unusable(info: ObjectInfo) -> str | None:
    """Why a decoded document cannot be acted on, or None. The nuid names the chunk subject
    that a get reads and a put or delete purges: one literal token, never a wildcard."""
    if not info.name:
        return "an empty name"
    nuid = info.nuid
    if nuid and (nuid == "*" or nuid == ">" or not _TOKEN_RE.fullmatch(nuid)):
        return f"nuid {nuid[:64]!r} is not one literal subject token"
    if info.size < 0 or info.chunks < 0:
        return f"a negative size or chunk count ({info.size}, {info.chunks})"
    options = info.options
    if options is not None and options.max_chunk_size is not None and options.max_chunk_size < 0:
        return f"a negative max_chunk_size ({options.max_chunk_size})"
    return None


def deleted_marker(info: ObjectInfo) -> ObjectInfo:
    """The metadata that marks ``info`` deleted (nats.go: size, chunks and digest cleared)."""
    return msgspec.structs.replace(info, deleted=True, size=0, chunks=0, digest=None, mtime=None)


# =========================================================================== digests


def digest_string(sha256: bytes) -> str:
    """``SHA-256=`` + base64url (padded) of the 32 digest bytes."""
    if len(sha256) != _SHA256_LEN:
        raise InvalidOptionError("a SHA-256 digest is 32 bytes")
    return DIGEST_PREFIX + base64.urlsafe_b64encode(sha256).decode()


def digest_bytes(digest: str) -> bytes:
    """The 32 bytes of a digest string: ``SHA-256=`` and the base64url of 32 bytes (43
    characters and an optional ``=``). The prefix is matched case-insensitively (older nats.go
    wrote ``sha-256=``). :class:`DigestMismatchError` for anything else (base64's habit of
    skipping characters outside its alphabet is not followed)."""
    match = _DIGEST_RE.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        prefix, sep, _ = str(digest).partition("=")
        kind = "unreadable" if sep and prefix.upper() == "SHA-256" else "unsupported"
        raise DigestMismatchError(f"{kind} object digest {str(digest)[:80]!r}")
    try:
        return base64.urlsafe_b64decode(match.group(1) + "=")
    except (binascii.Error, ValueError):  # pragma: no cover - the pattern is base64url of 32 bytes
        raise DigestMismatchError(f"unreadable object digest {digest[:80]!r}") from None


def check_digest(expected: str | None, computed: bytes) -> None:
    """Raise :class:`DigestMismatchError` unless ``computed`` (the shell's SHA-256 of the bytes
    read) is the digest recorded in the metadata."""
    if expected is None:
        raise DigestMismatchError("the object's metadata has no digest")
    if digest_bytes(expected) != computed:
        raise DigestMismatchError(
            f"the object's data does not match its digest (expected {expected}, read {digest_string(computed)})"
        )


# =========================================================================== put and get


class PutProgress:
    """A put's running totals: the chunk count and size that go into the metadata, and the
    stream sequence of the last chunk stored."""

    __slots__ = ("chunks", "size", "chunk_size", "last_seq")

    def __init__(self, chunk_size: int) -> None:
        self.chunk_size = check_chunk_size(chunk_size)
        self.chunks = 0
        self.size = 0
        self.last_seq = 0

    def stored(self, seq: int) -> None:
        """The PubAck of the next chunk, in the order they were published: a reader reads the
        chunks in stream order, so each must be stored after the one before it
        (:class:`ChunkOrderError` if not: a re-sent publish overtaken by later ones)."""
        if seq <= self.last_seq:
            raise ChunkOrderError(
                f"chunk stored at sequence {seq}, before the chunk published ahead of it "
                f"(sequence {self.last_seq}): a publish was sent again after later ones; the put is undone"
            )
        self.last_seq = seq

    def add(self, n: int) -> None:
        if not 0 < n <= self.chunk_size:
            raise InvalidOptionError(f"a chunk of {n} bytes does not fit the chunk size {self.chunk_size}")
        self.chunks += 1
        self.size += n

    def info(
        self,
        *,
        name: str,
        bucket: str,
        nuid: str,
        sha256: bytes,
        description: str | None = None,
        headers: dict[str, list[str]] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> ObjectInfo:
        """The metadata of the finished object."""
        return ObjectInfo(
            name=name,
            bucket=bucket,
            nuid=nuid,
            size=self.size,
            chunks=self.chunks,
            digest=digest_string(sha256),
            description=description,
            headers=headers,
            metadata=metadata,
            options=ObjectMetaOptions(max_chunk_size=self.chunk_size),
        )


class ChunkReader:
    """The reader's decisions for one object: each chunk is checked against the metadata's
    size and chunk count as it arrives; the end is the chunk the metadata announces as the
    last, and the server must then report nothing more pending on the chunk subject (a chunk
    less, or one more, is an error, as it is for nats.go's reader); the digest is checked at
    the end, before the last chunk is handed out."""

    __slots__ = ("info", "chunks", "size", "done")

    def __init__(self, info: ObjectInfo) -> None:
        self.info = info
        self.chunks = 0
        self.size = 0
        self.done = info.size == 0 and info.chunks == 0

    def accept(self, n: int, num_pending: int | None) -> bool:
        """Account one chunk of ``n`` bytes (``num_pending``: what the consumer still holds
        after it). True when it is the last one; :class:`DigestMismatchError` when the chunks
        cannot be this object's."""
        info = self.info
        if self.done:
            raise DigestMismatchError(f"object {info.name!r}: a chunk after the last one")
        self.chunks += 1
        self.size += n
        if self.chunks > info.chunks or self.size > info.size:
            raise DigestMismatchError(
                f"object {info.name!r}: more data than its metadata says "
                f"({self.chunks} chunks / {self.size} bytes read, {info.chunks} / {info.size} expected)"
            )
        last = self.chunks == info.chunks or num_pending == 0
        if last:
            self.done = True
            if num_pending:
                raise DigestMismatchError(
                    f"object {info.name!r}: more chunks stored than its metadata says ({info.chunks})"
                )
            if self.chunks != info.chunks or self.size != info.size:
                raise DigestMismatchError(
                    f"object {info.name!r}: chunks missing ({self.chunks} chunks / {self.size} bytes read, "
                    f"{info.chunks} / {info.size} expected)"
                )
        return last

    def finish(self, sha256: bytes) -> None:
        """At the end: the digest of every byte read must be the recorded one."""
        check_digest(self.info.digest, sha256)


# =========================================================================== watching


class ObjectWatchState(WatchState[ObjectInfo]):
    """The object-store watcher's decisions (see :class:`jscore.watch.WatchState`) over the
    deliveries of ``$O.<bucket>.M.>``: each is an object's metadata, its ``mtime`` the
    message's time. Deleted markers are left out with ``ignore_deletes``; a message that is not
    an object description is left out too (as nats.go does), noted in ``skipped``, and still
    counts for the "caught up" marker."""

    __slots__ = ()

    def __init__(self, options: WatchOptions) -> None:
        if options.meta_only:
            raise InvalidOptionError("an object-store watch has no meta_only option")
        super().__init__(options)

    def item(
        self, subject: str, data: bytes, headers: Headers | None, stream_seq: int, timestamp: datetime,
        num_pending: int,
    ) -> ObjectInfo | None:
        try:
            info = decode_info(data, timestamp)
        except BadObjectMetaError as exc:
            self.skipped.append((subject, str(exc)))
            return None
        if self.options.ignore_deletes and info.deleted:
            return None
        return info
