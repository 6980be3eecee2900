"""The ``kvBucket`` read of the ``jetstream`` data source: a key-value bucket's current values
as one consistent snapshot.

::

    df = spark.read.format("jetstream").option("servers", url).option("kvBucket", "cfg").load()
    # key string, value binary, revision long, created timestamp

The driver reads the bucket's stream info once: its last sequence is the snapshot's revision.
It then lists the bucket's keys (the stream's subjects) and splits them into partitions of
keys. Each task reads the latest entry of its keys as of that revision, with batched direct
gets of up to 1024 keys (``up_to_seq``: the pages and the tasks all read the same snapshot,
whatever is written meanwhile); deleted and purged keys are left out. A bucket without direct
get is read in one task by an ordered consumer bounded by the same revision (the fallback of
:meth:`jssync.kv.KeyValue.get_many`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.datasource import DataSourceReader, InputPartition

from jscore import kv as K
from jscore.errors import InvalidOptionError

from ._cache import discard_client, get_jetstream, lease
from ._config import NatsConfig, option_lookup
from .datasource import DEFAULT_RECORDS_PER_PARTITION, _opt, _positive_int

__all__ = ["KV_SCHEMA", "KV_BUCKET_OPTION", "KvReadOptions", "KeyRange", "KvBucketReader", "wants_kv_bucket",
           "read_keys"]

_log = logging.getLogger("jssync.spark")

KV_BUCKET_OPTION: Final = "kvBucket"
KV_SCHEMA: Final = "key string, value binary, revision long, created timestamp"
"""The schema of a ``kvBucket`` read (DDL)."""

GET_BATCH: Final = 1024
"""Keys per batched direct get (the most one multi_last request may match)."""

_INFO_TIMEOUT: Final = 10.0
# The options of a stream read that make no sense for a bucket's snapshot.
_STREAM_ONLY: Final = ("stream", "subjects", "startingOffsets", "startingTimestamp", "endingOffsets",
                       "maxRecordsPerTrigger", "failOnDataLoss", "fetchBatchSize")


def wants_kv_bucket(options: Mapping[str, str]) -> bool:
    """True when the options ask for a ``kvBucket`` read."""
    return _opt(option_lookup(options), KV_BUCKET_OPTION) is not None


@dataclass(frozen=True)
class KvReadOptions:
    """A ``kvBucket`` read's options: the bucket, and how its keys are split into partitions
    (``minPartitions``, ``maxRecordsPerPartition``: keys per partition)."""

    bucket: str
    min_partitions: int | None = None
    max_records_per_partition: int | None = None

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
    then its keys."""
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
        # Every key that had a message at the snapshot still has a subject now (unless all its
        # messages were removed since, and then they are gone for any reader); keys written
        # after it are read as absent (up_to_seq).
        subjects = js.stream_info(kv.stream.name, subjects_filter=f"{K.SUBJECT_PREFIX}{bucket}.>",
                                  timeout=_INFO_TIMEOUT).state.subjects or {}
    keys = sorted(K.key_of(bucket, s) for s in subjects)
    groups = split_keys(keys, min_partitions=kopts.min_partitions,
                        max_records_per_partition=kopts.max_records_per_partition)
    _log.info("jetstream kvBucket read of %r: %d keys as of revision %d in %d partitions",
              bucket, len(keys), revision, len(groups))
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
            chunks: list[list[str]] = [[">"]] if keys is None else [
                list(keys[i:i + GET_BATCH]) for i in range(0, len(keys), GET_BATCH)
            ]
            for chunk in chunks:
                snap = kv.get_many(chunk, revision=part.revision, timeout=_INFO_TIMEOUT)
                for e in sorted(snap.values(), key=lambda e: e.key):
                    yield (e.key, e.value, e.revision, e.created)
            failed = False
        finally:
            if failed and (client.is_closed or not client.is_connected):
                discard_client(config, client)  # (a broken connection must not serve the retry)


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
