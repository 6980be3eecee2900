"""The key-value store's rules, without I/O: the layout shared with the ``nats`` CLI, nats.go
and nats-py, key and bucket validation, the bucket's stream configuration, entries decoded
from stored or delivered messages, the decisions of ``create`` and ``purge_deletes``, and the
watcher's decoding of an ordered consumer's deliveries (the watcher itself is
:mod:`jscore.watch`).

The layout: bucket ``B`` is the stream ``KV_B`` capturing ``$KV.B.>``; key ``k`` is stored on
the subject ``$KV.B.k``. A put is a plain message; a delete is an empty message with the header
``KV-Operation: DEL``; a purge is an empty message with ``KV-Operation: PURGE`` and
``Nats-Rollup: sub`` (the server then drops the key's older messages). The bucket's history is
the stream's ``max_msgs_per_subject``. A server limit marker (``Nats-Marker-Reason``) reads as
a delete (``Remove``) or a purge (``MaxAge``, ``Purge``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Final, TypedDict

import msgspec

from .errors import InvalidBucketNameError, InvalidKeyError, InvalidOptionError
from .headers import Headers
from .protocol import MAX_SUBJECT_BYTES
from .models import Compression, DiscardPolicy, Placement, StorageType, StreamConfig, StreamInfo, check_placement
from .validate import check_bool
from .watch import WatchChanged, WatchMachine, WatchOptions
from .watch import WatchState as _WatchState

__all__ = [
    "KV_OPERATION",
    "KV_ROLLUP",
    "MARKER_REASON",
    "KeyValueOp",
    "KeyValueEntry",
    "KeyValueStatus",
    "WatchOptions",
    "WatchState",
    "WatchMachine",
    "WatchChanged",
    "check_bucket",
    "check_key",
    "check_filter",
    "stream_name",
    "key_subject",
    "filter_subjects",
    "bucket_config",
    "KeyValueFields",
    "entry_from_stored",
    "entry_from_delivery",
    "operation_of",
    "status_from_info",
    "purge_keep",
]

KV_OPERATION: Final = "KV-Operation"
KV_ROLLUP: Final = "Nats-Rollup"
MARKER_REASON: Final = "Nats-Marker-Reason"
ROLLUP_SUBJECT: Final = "sub"
STREAM_PREFIX: Final = "KV_"
SUBJECT_PREFIX: Final = "$KV."
MAX_HISTORY: Final = 64
DEFAULT_DUPLICATE_WINDOW: Final = 120.0  # seconds (the server's own default)

_BUCKET_RE: Final = re.compile(r"[A-Za-z0-9_-]+")
_KEY_RE: Final = re.compile(r"[-/_=.A-Za-z0-9]+")
_FILTER_RE: Final = re.compile(r"[-/_=.A-Za-z0-9*>]+")


class KeyValueOp(str, enum.Enum):
    """What an entry records: a value (``PUT``), a delete marker (``DEL``) or a purge marker
    (``PURGE``). The wire strings are the ``KV-Operation`` header's (none for a put)."""

    PUT = "PUT"
    DEL = "DEL"
    PURGE = "PURGE"


class KeyValueEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One revision of a key. ``value`` is ``b""`` for delete and purge markers and for
    meta-only watches; ``revision`` is the stream sequence; ``delta`` how many newer entries
    of the watched keys there were when it was delivered (0 from a get)."""

    bucket: str
    key: str
    value: bytes
    revision: int
    created: datetime
    delta: int = 0
    operation: KeyValueOp = KeyValueOp.PUT


class KeyValueStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A bucket's status, from its stream's info."""

    bucket: str
    values: int
    history: int
    ttl: float | None
    bytes: int
    backing_store: str = "JetStream"
    is_compressed: bool = False
    limit_marker_ttl: float | None = None
    stream_info: StreamInfo | None = None


# --------------------------------------------------------------------------- validation


def check_bucket(bucket: object) -> str:
    """The bucket name, or :class:`InvalidBucketNameError` (an InvalidOptionError): 1+ of
    ``A-Z a-z 0-9 _ -``."""
    if not isinstance(bucket, str) or not _BUCKET_RE.fullmatch(bucket):
        raise InvalidBucketNameError(f"invalid bucket name {str(bucket)[:64]!r}: 1+ characters of A-Z a-z 0-9 _ -")
    return bucket


def _check_tokens(key: str, what: str) -> None:
    if key.startswith(".") or key.endswith(".") or ".." in key:
        raise InvalidKeyError(f"invalid {what} {key[:64]!r}: empty token (a leading, trailing or double '.')")


def check_key(key: object) -> str:
    """The key, or :class:`InvalidKeyError`: 1+ of ``A-Z a-z 0-9 - _ / = .``, no empty token."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise InvalidKeyError(f"invalid key {str(key)[:64]!r}: 1+ characters of A-Z a-z 0-9 - _ / = .")
    _check_tokens(key, "key")
    return key


def check_filter(pattern: object) -> str:
    """A key filter: a key in which a token ``*`` matches one token and a final ``>`` the rest."""
    if not isinstance(pattern, str) or not _FILTER_RE.fullmatch(pattern):
        raise InvalidKeyError(f"invalid key filter {str(pattern)[:64]!r}")
    _check_tokens(pattern, "key filter")
    tokens = pattern.split(".")
    for i, t in enumerate(tokens):
        if ("*" in t and t != "*") or (">" in t and (t != ">" or i != len(tokens) - 1)):
            raise InvalidKeyError(f"invalid key filter {pattern[:64]!r}: '*' and a final '>' must be whole tokens")
    return pattern


def stream_name(bucket: str) -> str:
    return STREAM_PREFIX + bucket


def _fits(subject: str, what: str, text: str) -> str:
    """``subject`` if it is within the server's subject limit (keys, filters and bucket names
    are ASCII, so characters are bytes), else :class:`InvalidKeyError` naming the key."""
    if len(subject) > MAX_SUBJECT_BYTES:
        raise InvalidKeyError(
            f"{what} {text[:64]!r}... is too long: its subject would be "
            f"{len(subject)} bytes; the limit is {MAX_SUBJECT_BYTES}"
        )
    return subject


def key_subject(bucket: str, key: str) -> str:
    """``$KV.<bucket>.<key>`` of a valid key (:class:`InvalidKeyError` otherwise, also when
    the subject would be over the server's limit)."""
    return _fits(f"{SUBJECT_PREFIX}{bucket}.{check_key(key)}", "key", key)


def filter_subjects(bucket: str, filters: Iterable[str]) -> list[str]:
    """The stream subjects of key filters; no filter means every key."""
    out = [_fits(f"{SUBJECT_PREFIX}{bucket}.{check_filter(f)}", "key filter", f) for f in filters]
    return out or [f"{SUBJECT_PREFIX}{bucket}.>"]


def key_of(bucket: str, subject: str) -> str:
    prefix = f"{SUBJECT_PREFIX}{bucket}."
    return subject[len(prefix):] if subject.startswith(prefix) else subject


# --------------------------------------------------------------------------- bucket config


def bucket_config(
    bucket: str,
    *,
    description: str | None = None,
    history: int = 1,
    ttl: float | None = None,
    max_value_size: int | None = None,
    max_bytes: int | None = None,
    storage: StorageType | str = StorageType.FILE,
    replicas: int = 1,
    limit_marker_ttl: float | None = None,
    metadata: dict[str, str] | None = None,
    compression: bool = False,
    placement: Placement | None = None,
) -> StreamConfig:
    """The stream configuration of a bucket, as the ``nats`` CLI and nats.go make it: history as
    ``max_msgs_per_subject`` (1..64), ``ttl`` as ``max_age``, a duplicate window of two minutes
    or the TTL when shorter, direct get and rollup headers allowed, deletes through the API
    denied, discard new; ``limit_marker_ttl`` turns on per-message TTL and limit markers;
    ``compression`` is s2 on the server; ``placement`` a cluster and/or server tags."""
    check_bucket(bucket)
    check_bool(compression, "compression")
    check_placement(placement)
    if isinstance(history, bool) or not isinstance(history, int) or not 1 <= history <= MAX_HISTORY:
        raise InvalidOptionError(f"history must be an int in 1..{MAX_HISTORY}, not {history!r}")
    if replicas < 1:
        raise InvalidOptionError(f"replicas must be at least 1, not {replicas!r}")
    for name, value in (("ttl", ttl), ("limit_marker_ttl", limit_marker_ttl)):
        if value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise InvalidOptionError(f"{name} must be a non-negative number of seconds, not {value!r}")
    if limit_marker_ttl is not None and 0 < limit_marker_ttl < 1:
        raise InvalidOptionError(f"limit_marker_ttl must be at least 1 second, not {limit_marker_ttl!r}")
    duplicate_window = DEFAULT_DUPLICATE_WINDOW
    if ttl and ttl < duplicate_window:
        duplicate_window = float(ttl)
    return StreamConfig(
        name=stream_name(bucket),
        description=description,
        subjects=[f"{SUBJECT_PREFIX}{bucket}.>"],
        max_msgs_per_subject=history,
        max_bytes=-1 if max_bytes is None else max_bytes,
        max_age=float(ttl) if ttl else 0.0,
        max_msg_size=-1 if max_value_size is None else max_value_size,
        max_msgs=-1,
        max_consumers=-1,
        storage=StorageType(storage),
        num_replicas=replicas,
        allow_rollup_hdrs=True,
        deny_delete=True,
        allow_direct=True,
        discard=DiscardPolicy.NEW,
        duplicate_window=duplicate_window,
        allow_msg_ttl=True if limit_marker_ttl else None,
        subject_delete_marker_ttl=float(limit_marker_ttl) if limit_marker_ttl else None,
        metadata=metadata,
        compression=Compression.S2 if compression else None,
        placement=placement,
    )


class KeyValueFields(TypedDict, total=False):
    """The keywords of a bucket's configuration (:func:`bucket_config`), for the typed
    ``**fields`` of ``create_key_value`` / ``update_key_value`` / ``create_or_update_key_value``."""

    description: str | None
    history: int
    ttl: float | None
    max_value_size: int | None
    max_bytes: int | None
    storage: StorageType | str
    replicas: int
    limit_marker_ttl: float | None
    metadata: dict[str, str] | None
    compression: bool
    placement: Placement | None


def status_from_info(bucket: str, info: StreamInfo) -> KeyValueStatus:
    cfg = info.config
    compression = cfg.compression
    return KeyValueStatus(
        bucket=bucket,
        values=info.state.messages,
        history=cfg.max_msgs_per_subject or 1,
        ttl=float(cfg.max_age) if cfg.max_age else None,
        bytes=info.state.bytes,
        is_compressed=compression is not None and str(getattr(compression, "value", compression)) not in ("", "none"),
        limit_marker_ttl=float(cfg.subject_delete_marker_ttl) if cfg.subject_delete_marker_ttl else None,
        stream_info=info,
    )


# --------------------------------------------------------------------------- entries


def operation_of(headers: Headers | None) -> KeyValueOp:
    """What a stored message records, read as nats.go reads it: ``KV-Operation`` exactly
    ``DEL`` or ``PURGE`` (an absent or empty one falls through), else a server limit marker's
    ``Nats-Marker-Reason`` exactly ``Remove`` (a delete), ``MaxAge`` or ``Purge`` (a purge);
    anything else is a put and keeps its value. Header names match without regard to case."""
    if not headers:
        return KeyValueOp.PUT
    block = headers._unsplit()
    if block is not None:  # (not split yet: most messages name neither header, a watcher's every one)
        low = block.lower()
        if "kv-operation:" not in low and "nats-marker-reason:" not in low:
            return KeyValueOp.PUT
    op = headers.get(KV_OPERATION)
    if op:
        return KeyValueOp.DEL if op == "DEL" else KeyValueOp.PURGE if op == "PURGE" else KeyValueOp.PUT
    reason = headers.get(MARKER_REASON)
    if reason == "Remove":
        return KeyValueOp.DEL
    if reason == "MaxAge" or reason == "Purge":
        return KeyValueOp.PURGE
    return KeyValueOp.PUT


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


def entry_from_stored(
    bucket: str, subject: str, seq: int, data: bytes, headers: Headers | None, time: datetime | None
) -> KeyValueEntry:
    """The entry of a message read with a get (direct or not)."""
    op = operation_of(headers)
    return KeyValueEntry(
        bucket=bucket,
        key=key_of(bucket, subject),
        value=data if op is KeyValueOp.PUT else b"",
        revision=seq,
        created=time if time is not None else _EPOCH,
        delta=0,
        operation=op,
    )


def entry_from_delivery(
    bucket: str,
    subject: str,
    data: bytes,
    headers: Headers | None,
    stream_seq: int,
    timestamp: datetime,
    num_pending: int,
) -> KeyValueEntry:
    """The entry of a message delivered to a watcher (its metadata from the ack subject)."""
    op = operation_of(headers)
    return KeyValueEntry(
        bucket=bucket,
        key=key_of(bucket, subject),
        value=data if op is KeyValueOp.PUT else b"",
        revision=stream_seq,
        created=timestamp,
        delta=num_pending,
        operation=op,
    )


# --------------------------------------------------------------------------- purge_deletes


def purge_keep(entry: KeyValueEntry, older_than: float | None, now_wall: datetime) -> int:
    """How many messages of a deleted key ``purge_deletes`` keeps: 0 (the marker too) once the
    marker is older than ``older_than`` seconds (default 30 minutes, as nats.go; 0 or less: all
    markers go), else 1 (the marker stays so that watchers still see the delete)."""
    limit = 30 * 60.0 if older_than is None else older_than
    if limit <= 0:
        return 0
    age = (now_wall - entry.created).total_seconds()
    return 0 if age > limit else 1


# --------------------------------------------------------------------------- the watcher


class WatchState(_WatchState[KeyValueEntry]):
    """The key-value watcher's decisions (see :class:`jscore.watch.WatchState`): each delivery
    is an entry of ``bucket`` (without its value with ``meta_only``); deletes and purges are
    left out with ``ignore_deletes``."""

    __slots__ = ("bucket",)

    def __init__(self, bucket: str, options: WatchOptions) -> None:
        super().__init__(options)
        self.bucket = bucket

    def item(
        self, subject: str, data: bytes, headers: Headers | None, stream_seq: int, timestamp: datetime,
        num_pending: int,
    ) -> KeyValueEntry | None:
        options = self.options
        entry = entry_from_delivery(self.bucket, subject, b"" if options.meta_only else data, headers,
                                    stream_seq, timestamp, num_pending)
        if options.ignore_deletes and entry.operation is not KeyValueOp.PUT:
            return None
        return entry


def snapshot_entries(bucket: str, entries: Sequence[KeyValueEntry]) -> dict[str, KeyValueEntry]:
    """``get_many``'s result: the last entry per key, without deletes and purges."""
    out: dict[str, KeyValueEntry] = {}
    for e in entries:
        if e.operation is KeyValueOp.PUT:
            out[e.key] = e
        else:
            out.pop(e.key, None)
    return out
