"""The keys of a key-value bucket as of a snapshot revision: the driver's side of a
``kvBucket`` read (:mod:`jssync.spark.kvread`). Nothing here imports pyspark.

The read's snapshot is the bucket stream's last sequence, read once (``revision``). The tasks
then read the latest entry of their keys with ``up_to_seq=revision``, so the key list only has
to hold every key that had a value at ``revision`` and still has it stored; a key written later
is read as absent, a key whose messages were all removed since (purged, aged out) is gone for
any reader. The list comes from one of two places:

* **One stream-info reply** when the snapshot counted at most ``page_size`` subjects (100 000,
  the most the server lists in one reply) and one reply listed them all: the server builds a
  reply from one look at the stream, so it is one consistent set.
* **An ordered consumer** (headers only, the last message of each subject, as ``kv.keys()``
  reads) otherwise. Listing by stream-info pages is not consistent: the pages are slices at an
  offset into the sorted subjects, taken at different moments, so a subject that disappears
  before the next page (``purge_deletes``, a TTL, a purge) shifts the offsets and a key present
  at the snapshot is skipped. The consumer takes the subjects' last messages in one pass.
  It cannot stop at ``revision``: a key overwritten after the snapshot is delivered with its
  newer message only, so every subject it delivers up to its start counts (the bound is the
  stream's last sequence read after the first delivery, so the listing ends even while writers
  keep adding messages). A subject whose last message is a delete or purge marker at or below
  ``revision`` is left out: that key had no value at the snapshot.

Keys are the subjects' tails as stored, including keys the client's key rules refuse (a
client that does not validate keys can store ``$KV.<bucket>.café`` or ``a@b``): they are read
like any other. A stored subject that no get can address (a whole ``*`` or ``>`` token, or a
whitespace or control character, which only a raw non-pedantic publish can store) is left out
of ``keys`` and reported in ``unreadable``; the caller logs a warning with the count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from jscore import kv as K
from jscore.errors import BadSubjectError
from jscore.models import StreamInfo
from jscore.protocol import check_publish_subject

if TYPE_CHECKING:
    from jssync.jetstream import JetStream
    from jssync.kv import KeyValue

__all__ = ["SERVER_PAGE", "BucketKeys", "list_bucket_keys", "readable_key"]

SERVER_PAGE: Final = 100_000
"""The most subjects the server lists in one stream-info reply."""


@dataclass(frozen=True)
class BucketKeys:
    """The keys of a bucket as of a revision. ``keys``: sorted, each readable by a direct get
    of its subject; ``unreadable``: stored keys no get can address (see the module);
    ``method``: ``"info"`` (one stream-info reply) or ``"consumer"`` (an ordered consumer)."""

    keys: tuple[str, ...]
    unreadable: tuple[str, ...]
    method: Literal["info", "consumer"]


def readable_key(bucket: str, key: str) -> bool:
    """True when the subject of ``key`` is a literal subject a get can address."""
    try:
        check_publish_subject(f"{K.SUBJECT_PREFIX}{bucket}.{key}")
    except BadSubjectError:
        return False
    return True


def list_bucket_keys(
    js: JetStream, kv: KeyValue, snapshot: StreamInfo, *, page_size: int = SERVER_PAGE, timeout: float
) -> BucketKeys:
    """The keys of ``kv`` that may hold a value as of ``snapshot.state.last_seq`` (see the
    module). ``snapshot`` is the bucket stream's info read for the snapshot; ``timeout``
    bounds each request and each wait for the consumer's next message."""
    revision = snapshot.state.last_seq
    bucket = kv.bucket
    keys: Iterable[str] | None = None
    method: Literal["info", "consumer"] = "consumer"
    if snapshot.state.num_subjects <= page_size:
        info = js.stream_info(kv.stream.name, subjects_filter=f"{K.SUBJECT_PREFIX}{bucket}.>", timeout=timeout)
        subjects = info.state.subjects or {}
        # One reply (offset 0) that lists every subject (total): one consistent set. Else the
        # bucket grew past a page since the snapshot: the consumer below.
        if getattr(info, "offset", 0) == 0 and len(subjects) >= getattr(info, "total", 0) and len(subjects) <= page_size:
            keys = [K.key_of(bucket, s) for s in subjects]
            method = "info"
    if keys is None:
        keys = _consumer_keys(js, kv, revision, timeout)
    readable: set[str] = set()
    unreadable: set[str] = set()
    for k in keys:
        (readable if readable_key(bucket, k) else unreadable).add(k)
    return BucketKeys(tuple(sorted(readable)), tuple(sorted(unreadable)), method)


def _consumer_keys(js: JetStream, kv: KeyValue, revision: int, timeout: float) -> set[str]:
    keys: set[str] = set()
    bound: int | None = None
    with kv.watch(meta_only=True) as watcher:
        while True:
            entry = watcher.next(timeout)  # (NoMessagesError after timeout s without a message)
            if entry is None:  # every subject's last message delivered
                break
            if bound is None:  # the consumer exists: its initial messages are all <= bound
                bound = js.stream_info(kv.stream.name, timeout=timeout).state.last_seq
            if entry.revision > bound:  # a message written after the listing started
                break
            if entry.operation is K.KeyValueOp.PUT or entry.revision > revision:
                keys.add(entry.key)
    return keys
