"""The ``kvBucket`` read of the ``jetstream`` data source: a key-value bucket's current values
as one consistent snapshot.

::

    df = spark.read.format("jetstream").option("servers", url).option("kvBucket", "cfg").load()
    # key string, value binary, revision long, created timestamp

The driver reads the bucket's stream info once: its last sequence is the snapshot's revision.
It then lists the keys that may hold a value at that revision (:mod:`jssync.spark._kvlist`: one
stream-info reply for up to ``kvListPageSize`` keys, else an ordered consumer, so that keys
removed meanwhile cannot make the listing skip others) and splits them into partitions of keys.
Each task reads the latest entry of its keys as of that revision, with batched direct gets of up
to 1024 subjects (``up_to_seq``: the tasks all read the same snapshot, whatever is written
meanwhile); deleted and purged keys are left out. Keys are the subjects' tails as stored, also
those the client's key rules refuse. A bucket without direct get is read in one task by an
ordered consumer bounded by the same revision (the fallback of
:meth:`jssync.kv.KeyValue.get_many`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSourceReader, InputPartition

from jscore import kv as K
from jscore.errors import InvalidOptionError

from ._cache import discard_client, get_jetstream, lease
from ._config import NatsConfig, option_lookup
from ._kvlist import SERVER_PAGE, list_bucket_keys
from .datasource import DEFAULT_RECORDS_PER_PARTITION, _opt, _positive_int

if TYPE_CHECKING:
    from jssync.kv import KeyValue

__all__ = ["KV_SCHEMA", "KV_BUCKET_OPTION", "KvReadOptions", "KeyRange", "KvBucketReader", "wants_kv_bucket",
           "read_keys"]

_log = logging.getLogger("jssync.spark")

KV_BUCKET_OPTION: Final = "kvBucket"
KV_LIST_PAGE_OPTION: Final = "kvListPageSize"
KV_SCHEMA: Final = "key string, value binary, revision long, created timestamp"
"""The schema of a ``kvBucket`` read (DDL)."""

GET_BATCH: Final = 1024
"""Keys per batched direct get (the most one multi_last request may match)."""

_INFO_TIMEOUT: Final = 10.0
# The options of a stream read that make no sense for a bucket's snapshot.
_STREAM_ONLY: Final = ("stream", "subjects", "startingOffsets", "startingTimestamp", "endingOffsets",
                       "maxRecordsPerTrigger", "failOnDataLoss", "fetchBatchSize", "directGet")


def wants_kv_bucket(options: Mapping[str, str]) -> bool:
    """True when the options ask for a ``kvBucket`` read."""
    return _opt(option_lookup(options), KV_BUCKET_OPTION) is not None


@dataclass(frozen=True)
class KvReadOptions:
    """A ``kvBucket`` read's options: the bucket, and how its keys are split into partitions
    (``minPartitions``, ``maxRecordsPerPartition``: keys per partition), and up to how many
    keys the driver lists them from one stream-info reply (``kvListPageSize``; more: an ordered
    consumer)."""

    bucket: str
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    list_page_size: int = SERVER_PAGE

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool = False) -> KvReadOptions:
        """Parse and check the options (:class:`InvalidOptionError` naming the option)."""
        opts = option_lookup(options)
        bucket = _opt(opts, KV_BUCKET_OPTION)
        if bucket is None:
            raise InvalidOptionError(f"{KV_BUCKET_OPTION}: the option is required (the name of the bucket)")
        if streaming:
            raise InvalidOptionError(f"{KV_BUCKET_OPTION}: only a batch read (spark.read) reads a bucket")
        try:
            K.check_bucket(bucket)
        except InvalidOptionError:
            raise InvalidOptionError(f"{KV_BUCKET_OPTION}: not a valid bucket name: {bucket!r}") from None
        for name in _STREAM_ONLY:
            if _opt(opts, name) is not None:
                raise InvalidOptionError(f"{name}: not an option of a {KV_BUCKET_OPTION} read")
        return cls(
            bucket=bucket,
            min_partitions=_positive_int(opts, "minPartitions"),
            max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
            list_page_size=_positive_int(opts, KV_LIST_PAGE_OPTION) or SERVER_PAGE,
        )


class KeyRange(InputPartition):
    """One read task: the latest entry of ``keys`` as of ``revision`` (``keys`` None: every
    key of the bucket, read by an ordered consumer, for a bucket without direct get)."""

    def __init__(self, index: int, bucket: str, revision: int, keys: tuple[str, ...] | None) -> None:
        super().__init__(index)
        self.index = index
        self.bucket = bucket
        self.revision = revision
        self.keys = keys

    def __repr__(self) -> str:
        n = "all" if self.keys is None else len(self.keys)
        return f"KeyRange({self.index}, {self.bucket!r}, revision={self.revision}, keys={n})"


def split_keys(keys: Sequence[str], *, min_partitions: int | None, max_records_per_partition: int | None) -> list[
        tuple[str, ...]]:
    """``keys`` in contiguous groups: as many as ``max_records_per_partition`` needs (default
    :data:`DEFAULT_RECORDS_PER_PARTITION`), at least ``min_partitions``, none empty."""
    n = len(keys)
    if n == 0:
        return []
    per = max_records_per_partition or DEFAULT_RECORDS_PER_PARTITION
    count = min(n, max(math.ceil(n / per), min_partitions or 1))
    base, extra = divmod(n, count)
    out: list[tuple[str, ...]] = []
    start = 0
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append(tuple(keys[start:start + size]))
        start += size
    return out


def plan(config: NatsConfig, kopts: KvReadOptions) -> list[KeyRange]:
    """The partitions of a snapshot read (on the driver): the bucket's last sequence read once,
    then its keys as of that sequence."""
    bucket = kopts.bucket
    with lease(config):
        js = get_jetstream(config)
        kv = js.key_value(bucket, timeout=_INFO_TIMEOUT)  # (BucketNotFoundError)
        info = kv.stream.cached_info
        revision = info.state.last_seq
        if revision == 0 or info.state.messages == 0:
            return [KeyRange(0, bucket, revision, ())]
        if not info.config.allow_direct:
            return [KeyRange(0, bucket, revision, None)]
        listed = list_bucket_keys(js, kv, info, page_size=kopts.list_page_size, timeout=_INFO_TIMEOUT)
    if listed.unreadable:
        _log.warning(
            "jetstream kvBucket read of %r: %d keys left out: their subjects have a '*' or '>' token, whitespace or "
            "a control character, which no get can address (stored by a client that does not check subjects): %s",
            bucket, len(listed.unreadable), ", ".join(repr(k) for k in listed.unreadable[:20]),
        )
    keys = listed.keys
    groups = split_keys(keys, min_partitions=kopts.min_partitions,
                        max_records_per_partition=kopts.max_records_per_partition)
    _log.info("jetstream kvBucket read of %r: %d keys (listed by %s) as of revision %d in %d partitions",
              bucket, len(keys), "stream info" if listed.method == "info" else "an ordered consumer", revision,
              len(groups))
    return [KeyRange(i, bucket, revision, g) for i, g in enumerate(groups)] or [KeyRange(0, bucket, revision, ())]


def read_keys(config: NatsConfig, part: KeyRange) -> Iterator[tuple[Any, ...]]:
    """The rows of one partition: ``(key, value, revision, created)`` of every key of
    ``part`` whose latest entry as of ``part.revision`` is a value."""
    if part.keys == ():
        return
    with lease(config) as client:
        failed = True
        try:
            kv = get_jetstream(config).key_value(part.bucket, timeout=_INFO_TIMEOUT)
            keys = part.keys
            snaps: Iterable[Mapping[str, Any]]
            if keys is None:  # no direct get: an ordered consumer bounded by the revision
                snaps = [kv.get_many(">", revision=part.revision, timeout=_INFO_TIMEOUT)]
            else:  # the subjects as stored (keys the client's key rules refuse included)
                snaps = (_direct_snapshot(kv, keys[i:i + GET_BATCH], part.revision) for i in range(0, len(keys), GET_BATCH))
            for snap in snaps:
                for e in sorted(snap.values(), key=lambda e: e.key):
                    yield (e.key, e.value, e.revision, e.created)
            failed = False
        finally:
            if failed and (client.is_closed or not client.is_connected):
                discard_client(config, client)  # (a broken connection must not serve the retry)


def _direct_snapshot(kv: KeyValue, keys: Sequence[str], revision: int) -> dict[str, K.KeyValueEntry]:
    """The latest entry of each of ``keys`` as of ``revision``: one batched direct get of their
    literal subjects (at most 1024, each matching one subject), without the key rules'
    check."""
    bucket = kv.bucket
    subjects = [f"{K.SUBJECT_PREFIX}{bucket}.{k}" for k in keys]
    with kv.stream.direct_get_last_for(subjects, up_to_seq=revision, timeout=_INFO_TIMEOUT) as it:
        entries = [K.entry_from_stored(bucket, m.subject, m.seq, m.data, m.headers, m.time) for m in it]
    return K.snapshot_entries(bucket, entries)


class KvBucketReader(DataSourceReader):
    """The batch reader of a ``kvBucket`` read."""

    def __init__(self, config: NatsConfig, kopts: KvReadOptions) -> None:
        self.config = config
        self.kopts = kopts

    def partitions(self) -> Sequence[InputPartition]:
        return plan(self.config, self.kopts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KeyRange)
        return read_keys(self.config, partition)
