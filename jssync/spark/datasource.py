"""``JetStreamDataSource``: the ``jetstream`` PySpark data source (batch and streaming, read and
write), on the PySpark 4 Python Data Source API.

::

    from jssync.spark import JetStreamDataSource
    spark.dataSource.register(JetStreamDataSource)
    df = spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS").load()
    df.write.format("jetstream").option("servers", url).option("subject", "orders.new").mode("append").save()
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", "ORDERS").load()
         .writeStream.format("parquet").option("checkpointLocation", ckpt).trigger(availableNow=True).start(out))

Reading
    Offsets are stream sequences. A batch read resolves ``[start, end]`` on the driver from the
    stream's info and the options, then splits it into contiguous sequence ranges, one Spark task
    each. A task reads its range with an ordered consumer (ephemeral, ack-less, memory storage,
    created at ``opt_start_seq`` = the range's start, deleted at the end: no server-side state is
    left behind) and stops by *sequence*, not by count: deleted or purged sequences are simply
    absent and a subject filter makes a range sparse. A streaming read keeps ``{"seq": N}`` (the
    next sequence to read) in Spark's checkpoint; each micro-batch is the range ``[start, end)``.

Writing
    Through :func:`jssync.spark._writer.write_rows` (async publishes, every ack checked, retries
    with the same msg id). The write id is fixed on the driver in :meth:`JetStreamDataSource.writer`
    / :meth:`~JetStreamDataSource.streamWriter`, so task retries and speculative attempts publish
    the same msg ids; a streaming write id also carries the query id (kept in the checkpoint) and
    the micro-batch id, so a micro-batch replayed after a restart is deduplicated by the stream.

Options are strings (Kafka connector style), validated on the driver; every error is an
:class:`~jscore.errors.InvalidOptionError` whose message starts with the option's name.
"""

from __future__ import annotations

import array
import functools
import hashlib
import itertools
import json
import logging
import math
import re
from bisect import bisect_right
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, TypeVar

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.types import StructType
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "jssync.spark.datasource needs PySpark >= 4.0 and pyarrow (the 'spark' extra): "
        "pip install -e '.[spark]' (in the jssync checkout)"
    ) from _exc

from jscore import bulk
from jscore import directget as DG
from jscore.bulk import DeliveryColumns
from jscore.errors import (
    InvalidOptionError,
    JetStreamError,
    MaxBytesExceededError,
    MsgNotFoundError,
    NatsError,
    NoMessagesError,
    PullRequestLimitError,
)
from jscore.headers import Headers, header_columns, header_lines_dict, headers_dict
from jscore.ordered import RangePulls
from jscore.times import from_unix_ns, parse_server_stamp, unix_ns
from jssync.stream import Stream

from ._cache import discard_client, get_jetstream, lease
from ._config import NatsConfig, WriteOptions, option_lookup
from ._options import Role, normalize
from ._values import (
    DROP,
    Field,
    JsonPlan,
    MalformedRecordError,
    ParseMode,
    ValueDecoder,
    ValueFormat,
    _Bad,
    ddl,
    json_plan,
    parse_ddl,
    payload_rows,
)

if TYPE_CHECKING:
    from jssync.jetstream import JetStream
    from jssync.msg import JsMsg
    from jssync.ordered import OrderedConsumer
    from jscore.models import StreamInfo

# The streaming sink gets Arrow batches where PySpark has DataSourceStreamArrowWriter (4.1+);
# PySpark 4.0 hands it Rows.
_StreamWriterBase: Any
try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover - PySpark 4.0
    _StreamWriterBase = DataSourceStreamWriter

# Admission control (ReadLimit, PySpark >= 4.2) and Trigger.AvailableNow for Python sources
# (PySpark >= 4.2): optional; PySpark 4.0 / 4.1 call latestOffset() without arguments.
_AvailableNowBase: Any
_ReadAllAvailable: Any
_ReadMaxRows: Any
_ReadMinRows: Any
try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable as _ReadAllAvailable,
        ReadMaxRows as _ReadMaxRows,
        ReadMinRows as _ReadMinRows,
    )

    HAS_ADMISSION_CONTROL: bool = True
except ImportError:  # pragma: no cover - PySpark 4.0 / 4.1
    _ReadAllAvailable = _ReadMaxRows = _ReadMinRows = None
    HAS_ADMISSION_CONTROL = False

try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNowBase

    HAS_TRIGGER_AVAILABLE_NOW: bool = True
except ImportError:  # pragma: no cover - PySpark 4.0 / 4.1

    class _AvailableNowBase:  # type: ignore[no-redef]
        """Stand-in mixin where PySpark has no SupportsTriggerAvailableNow (Spark then runs
        Trigger.AvailableNow by calling latestOffset once and reading up to that offset)."""

    HAS_TRIGGER_AVAILABLE_NOW = False


__all__ = [
    "JetStreamDataSource",
    "ReadOptions",
    "SeqRange",
    "JetStreamCommitMessage",
    "SCHEMA",
    "DataLossError",
    "split_range",
    "iter_range",
    "iter_range_records",
    "iter_range_batches",
    "read_range",
    "streaming_write_id",
    "HAS_ADMISSION_CONTROL",
    "HAS_TRIGGER_AVAILABLE_NOW",
]

_log = logging.getLogger("jssync.spark")
_T = TypeVar("_T")

SCHEMA: Final = (
    "subject string, data binary, headers map<string,array<string>>, stream string, seq long, timestamp timestamp"
)
"""The read schema (DDL)."""

DEFAULT_RECORDS_PER_PARTITION: Final = 100_000
"""Sequences per read partition when neither ``maxRecordsPerPartition`` nor ``minPartitions``
asks for more partitions."""

DEFAULT_FETCH_BATCH: Final = 4096
"""Messages per no-wait pull of :func:`iter_range`'s ordered consumer (a read task's pulls are
:data:`READ_FETCH_BATCH`, or ``fetchBatchSize``). Each pull is a round trip and a fetch's
set-up; 4096 rows a pull read 1.2 times the rows per second of 1000 with 0.4 us less CPU a
row."""
READ_FETCH_BATCH: Final = 16_384
"""Messages per no-wait pull of a read task's ordered consumer when ``fetchBatchSize`` is not
set, each pull also stopping at :func:`read_fetch_bytes`: between two pulls the server sends
nothing to the task (a task builds and hands over its batches meanwhile), so fewer, larger pulls
keep it busier. Against 4096 a pull, a Spark read of 128-byte messages ran 1.1 times the rows
per second, with 0.2 us less of the server's CPU a row."""
READ_FETCH_BYTES: Final = 8 * 1024 * 1024


def read_fetch_bytes(max_payload: int) -> int:
    """The byte limit of a read task's pulls (:data:`READ_FETCH_BYTES`), at least twice the
    server's ``max_payload``, so that any one message fits: a pull that stops at its byte
    limit before its first message would deliver nothing."""
    return max(READ_FETCH_BYTES, 2 * max_payload)


DIRECT_BATCH: Final = 10_000
"""Messages per batched direct get of a read task (``directGet``: a stream with ``allow_direct``
read whole or by one filter subject), unless ``fetchBatchSize`` says otherwise; each also stops
at about :data:`DIRECT_MAX_BYTES`."""
DIRECT_MAX_BYTES: Final = 8 * 1024 * 1024
_MAX_EMPTY_RETRIES: Final = 50
_INFO_TIMEOUT: Final = 10.0

# Local properties Spark sets on the tasks of a streaming micro-batch.
_QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
_BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"


class DataLossError(JetStreamError):
    """A streaming (or batch) read would skip sequences that were purged or aged out of the
    stream; raised when ``failOnDataLoss`` is true (the default)."""


# ====================================================================== options


def _opt(opts: Mapping[str, str], name: str) -> str | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    text = _opt(opts, name)
    if text is None:
        return None
    try:
        n = int(text)
    except ValueError:
        raise InvalidOptionError(f"{name}: expected a positive integer, got {text!r}") from None
    if n < 1:
        raise InvalidOptionError(f"{name}: must be >= 1, got {text!r}")
    return n


def _bool_opt(opts: Mapping[str, str], name: str, default: bool) -> bool:
    text = _opt(opts, name)
    if text is None:
        return default
    low = text.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"{name}: expected 'true' or 'false', got {text!r}")


def _seq_json(name: str, text: str) -> int:
    """``{"seq": N}`` (N >= 1) -> N."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if (
        isinstance(value, dict)
        and set(value) == {"seq"}
        and isinstance(value["seq"], int)
        and not isinstance(value["seq"], bool)
        and value["seq"] >= 1
    ):
        return int(value["seq"])
    raise InvalidOptionError(
        f'{name}: expected "earliest", "latest" or a JSON object {{"seq": N}} with N >= 1, got {text!r}'
        if name == "startingOffsets"
        else f'{name}: expected "latest" or a JSON object {{"seq": N}} with N >= 1, got {text!r}'
    )


_EPOCH_MILLIS = re.compile(r"^\d{1,16}$")


def parse_timestamp(name: str, text: str) -> datetime:
    """ISO 8601 (naive means UTC) or integer epoch milliseconds -> an aware UTC datetime."""
    if _EPOCH_MILLIS.match(text):
        try:
            return datetime.fromtimestamp(int(text) / 1000.0, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise InvalidOptionError(f"{name}: epoch milliseconds out of range: {text!r}") from None
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        raise InvalidOptionError(
            f"{name}: expected an ISO 8601 timestamp (e.g. 2025-01-31T12:00:00Z) or epoch milliseconds, "
            f"got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


_STREAM_NAME_BAD = re.compile(r"[\s.*>/\\]")


@dataclass(frozen=True)
class ReadOptions:
    """The reader's options (a frozen, picklable value; see :meth:`from_options`).

    ``starting``: ``"earliest"``, ``"latest"`` or the first sequence to read (an int);
    ``starting_time`` (when set) wins over ``starting``; ``ending``: None for the stream's last
    sequence at planning time, else the first sequence *not* to read (exclusive, like Kafka's
    ``endingOffsets``); ``subjects``: filter subjects (wildcards allowed).
    """

    stream: str
    subjects: tuple[str, ...] = ()
    starting: str | int = "earliest"
    starting_time: datetime | None = None
    ending: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_records_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    fetch_batch: int | None = None
    partition_by: str = "sequence"
    include_headers: bool = True
    direct_get: bool = False
    value_format: ValueFormat = "binary"
    value_fields: tuple[Field, ...] = ()
    mode: ParseMode = "PERMISSIVE"
    corrupt_column: str = "_corrupt_record"

    @property
    def plain(self) -> bool:
        """The default columns (:data:`SCHEMA`): the reader's fast path."""
        return self.value_format == "binary" and self.include_headers

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        """Parse and validate the string options of a batch (``streaming=False``) or streaming
        read. Raises :class:`InvalidOptionError` naming the option."""
        opts = normalize(options, "stream_read" if streaming else "read")
        stream = _opt(opts, "stream")
        if stream is None:
            raise InvalidOptionError("stream: the option is required to read (the name of the stream)")
        if _STREAM_NAME_BAD.search(stream):
            raise InvalidOptionError(f"stream: not a valid stream name: {stream!r}")

        subjects: tuple[str, ...] = ()
        raw_subjects = _opt(opts, "subjects")
        if raw_subjects is not None:
            parts = [s.strip() for s in raw_subjects.split(",")]
            if any(not p or any(c.isspace() for c in p) for p in parts):
                raise InvalidOptionError(f"subjects: expected comma-separated subjects, got {raw_subjects!r}")
            for p in parts:
                tokens = p.split(".")
                if any(not t for t in tokens) or any(
                    (">" in t and (t != ">" or i != len(tokens) - 1)) or ("*" in t and t != "*")
                    for i, t in enumerate(tokens)
                ):
                    raise InvalidOptionError(f"subjects: not a valid subject filter: {p!r}")
            subjects = tuple(dict.fromkeys(parts))

        starting: str | int = "latest" if streaming else "earliest"
        raw_start = _opt(opts, "startingOffsets")
        if raw_start is not None:
            low = raw_start.lower()
            if low in ("earliest", "latest"):
                starting = low
            else:
                starting = _seq_json("startingOffsets", raw_start)
        if not streaming and starting == "latest":
            raise InvalidOptionError("startingOffsets: 'latest' is not valid for a batch read")

        starting_time: datetime | None = None
        raw_time = _opt(opts, "startingTimestamp")
        if raw_time is not None:
            if raw_start is not None:
                raise InvalidOptionError("startingTimestamp: give either startingTimestamp or startingOffsets, not both")
            starting_time = parse_timestamp("startingTimestamp", raw_time)

        ending: int | None = None
        raw_end = _opt(opts, "endingOffsets")
        if raw_end is not None:
            if streaming:
                raise InvalidOptionError("endingOffsets: only valid for a batch read, not a streaming one")
            if raw_end.lower() != "latest":
                ending = _seq_json("endingOffsets", raw_end)

        max_per_trigger = _positive_int(opts, "maxRecordsPerTrigger")
        if max_per_trigger is not None and not streaming:
            _log.info("jetstream[%s]: maxRecordsPerTrigger applies to streaming reads only (ignored)", stream)

        partition_by = (_opt(opts, "partitionBy") or "sequence").lower()
        if partition_by not in ("sequence", "subject"):
            raise InvalidOptionError(f"partitionBy: expected 'sequence' or 'subject', got {_opt(opts, 'partitionBy')!r}")

        raw_format = _opt(opts, "valueFormat")
        raw_schema = _opt(opts, "valueSchema")
        value_format = (raw_format or ("json" if raw_schema is not None else "binary")).lower()
        if value_format not in ("binary", "string", "json"):
            raise InvalidOptionError(f"valueFormat: expected 'binary', 'string' or 'json', got {raw_format!r}")
        fields: tuple[Field, ...] = ()
        if value_format == "json":
            if raw_schema is None:
                raise InvalidOptionError(
                    "valueSchema: valueFormat=json needs the payload's schema as DDL, e.g. 'id long, name string, "
                    "at timestamp'"
                )
            fields = parse_ddl(raw_schema, "valueSchema")
        elif raw_schema is not None:
            raise InvalidOptionError(f"valueSchema: only used with valueFormat=json (valueFormat is {value_format!r})")
        if _opt(opts, "kvListPageSize") is not None:
            raise InvalidOptionError("kvListPageSize: only used with kvBucket (a key-value bucket's read)")
        raw_mode = _opt(opts, "mode")
        mode = (raw_mode or "PERMISSIVE").upper()
        if mode not in ("PERMISSIVE", "DROPMALFORMED", "FAILFAST"):
            raise InvalidOptionError(f"mode: expected PERMISSIVE, DROPMALFORMED or FAILFAST, got {raw_mode!r}")
        corrupt = _opt(opts, "columnNameOfCorruptRecord") or "_corrupt_record"
        if (raw_mode is not None or "columnnameofcorruptrecord" in opts) and value_format == "binary":
            name = "mode" if raw_mode is not None else "columnNameOfCorruptRecord"
            raise InvalidOptionError(f"{name}: only used with valueFormat=json or string (a binary payload is never malformed)")
        return cls(
            stream=stream,
            subjects=subjects,
            starting=starting,
            starting_time=starting_time,
            ending=ending,
            min_partitions=_positive_int(opts, "minPartitions"),
            max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
            max_records_per_trigger=max_per_trigger if streaming else None,
            fail_on_data_loss=_bool_opt(opts, "failOnDataLoss", True),
            fetch_batch=_positive_int(opts, "fetchBatchSize"),
            partition_by=partition_by,
            include_headers=_bool_opt(opts, "includeHeaders", True),
            direct_get=_bool_opt(opts, "directGet", False),
            value_format=value_format,  # type: ignore[arg-type]
            value_fields=fields,
            mode=mode,  # type: ignore[arg-type]
            corrupt_column=corrupt,
        )

    def columns(self) -> tuple[Field, ...]:
        """The columns a read returns, in order (see docs/spark.md, "Reading payloads as columns").

        ``binary`` (default): :data:`SCHEMA`; ``string``: ``data`` is a string; ``json``: the
        fields of ``valueSchema`` first, then the message's columns (``data`` is dropped, and a
        value field named like a message column replaces it). ``PERMISSIVE`` adds the
        corrupt-record column after the value columns. ``includeHeaders=false`` drops
        ``headers``."""
        meta: list[Field] = [Field("subject", "string")]
        if self.value_format == "binary":
            meta.append(Field("data", "binary"))
        elif self.value_format == "string":
            meta.append(Field("data", "string"))
        if self.include_headers:
            meta.append(Field("headers", ("map", "string", ("array", "string"))))
        meta += [Field("stream", "string"), Field("seq", "long"), Field("timestamp", "timestamp")]
        if self.value_format == "binary":
            return tuple(meta)
        corrupt = [Field(self.corrupt_column, "string")] if self.mode == "PERMISSIVE" else []
        if self.value_format == "string":
            out = tuple(meta) + tuple(corrupt)
        else:
            values = self.decoded_fields()
            taken = {f.name.lower() for f in values} | {f.name.lower() for f in corrupt}
            out = values + tuple(corrupt) + tuple(f for f in meta if f.name.lower() not in taken)
        names = [f.name.lower() for f in out]
        if len(set(names)) != len(names):
            raise InvalidOptionError(
                f"columnNameOfCorruptRecord: {self.corrupt_column!r} is already a column of the read ({ddl(out)})"
            )
        return out

    def decoded_fields(self) -> tuple[Field, ...]:
        """The valueSchema fields decoded from the JSON payload (a string field named like the
        corrupt-record column is that column, not decoded)."""
        low = self.corrupt_column.lower()
        out = []
        for f in self.value_fields:
            if f.name.lower() == low and self.mode == "PERMISSIVE":
                if f.type != "string":
                    raise InvalidOptionError(
                        f"valueSchema: the corrupt-record column {f.name!r} must be a string, not {ddl((f,))}"
                    )
                continue
            out.append(f)
        return tuple(out)


# ====================================================================== partitions


class SeqRange(InputPartition):
    """One read task: stream sequences ``start`` to ``end``, both included. ``check_loss``:
    fail (``failOnDataLoss``) if sequences at the start of the range are gone when it is read.
    ``subjects``: the task's own filter (``partitionBy=subject``), else the read's."""

    def __init__(
        self, index: int, start: int, end: int, check_loss: bool = False, subjects: tuple[str, ...] | None = None
    ) -> None:
        super().__init__((start, end))
        self.index = index
        self.start = start
        self.end = end
        self.check_loss = check_loss
        self.subjects = subjects

    def __repr__(self) -> str:
        extra = f", subjects={self.subjects!r}" if self.subjects is not None else ""
        return f"SeqRange(index={self.index}, start={self.start}, end={self.end}{extra})"

    def _key(self) -> tuple[Any, ...]:
        return (self.index, self.start, self.end, self.check_loss, getattr(self, "subjects", None))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeqRange) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def split_range(
    start: int,
    end: int,
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
    check_loss: bool = False,
) -> list[SeqRange]:
    """Split ``[start, end]`` (inclusive) into contiguous ranges: as many as
    ``maxRecordsPerPartition`` needs (default :data:`DEFAULT_RECORDS_PER_PARTITION`), at least
    ``minPartitions``, at most one per sequence. An empty range gives no partition."""
    n = end - start + 1
    if n <= 0:
        return []
    per = max_records_per_partition or DEFAULT_RECORDS_PER_PARTITION
    count = max(math.ceil(n / per), min_partitions or 1)
    count = min(count, n)
    base, extra = divmod(n, count)
    out: list[SeqRange] = []
    s = start
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append(SeqRange(i, s, s + size - 1, check_loss))
        s += size
    return out


MAX_SUBJECT_PARTITIONS: Final = 10_000
"""``partitionBy=subject``: at most this many subjects (one partition or more each)."""


def split_by_subject(
    counts: Mapping[str, int],
    start: int,
    end: int,
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[SeqRange]:
    """``partitionBy=subject``: one or more partitions per subject of ``counts`` (subject ->
    messages, from the stream's info). A subject with more than ``maxRecordsPerPartition``
    messages (default :data:`DEFAULT_RECORDS_PER_PARTITION`) gets several, each reading that
    subject in a contiguous part of ``[start, end]``; the busiest subjects are split further
    until there are ``minPartitions``. Subjects without messages get none."""
    n = end - start + 1
    subjects = sorted(s for s, c in counts.items() if c > 0)
    if n <= 0 or not subjects:
        return []
    if len(subjects) > MAX_SUBJECT_PARTITIONS:
        raise InvalidOptionError(
            f"partitionBy: the read matches {len(subjects)} subjects; partitionBy=subject makes a partition per "
            f"subject (at most {MAX_SUBJECT_PARTITIONS}): narrow it with subjects, or use the default sequence ranges"
        )
    per = max_records_per_partition or DEFAULT_RECORDS_PER_PARTITION
    pieces = {s: min(n, max(1, math.ceil(counts[s] / per))) for s in subjects}
    want = min_partitions or 1
    while sum(pieces.values()) < want:
        s = max((x for x in subjects if pieces[x] < n), key=lambda x: counts[x] / pieces[x], default=None)
        if s is None:
            break
        pieces[s] += 1
    out: list[SeqRange] = []
    for s in subjects:
        k = pieces[s]
        base, extra = divmod(n, k)
        lo = start
        for i in range(k):
            size = base + (1 if i < extra else 0)
            out.append(SeqRange(len(out), lo, lo + size - 1, subjects=(s,)))
            lo += size
    return out


def _subject_counts(js: JetStream, ropts: ReadOptions) -> dict[str, int]:
    """Messages per subject of the read's filter (every subject when none), from the stream's info."""
    counts: dict[str, int] = {}
    for f in ropts.subjects or (">",):
        info = js.stream_info(ropts.stream, subjects_filter=f, timeout=_INFO_TIMEOUT)
        counts.update(info.state.subjects or {})
    return counts


# ====================================================================== stream access


def _stream_info(js: JetStream, stream: str) -> StreamInfo:
    return js.stream_info(stream, timeout=_INFO_TIMEOUT)


def _first_available(info: StreamInfo) -> int:
    """The lowest sequence a reader could still get (last_seq + 1 for an empty stream)."""
    st = info.state
    if st.messages == 0:
        return st.last_seq + 1
    return max(st.first_seq, 1)


def _close_ordered(js: JetStream, oc: OrderedConsumer) -> None:
    name = oc.state.close()
    if name is None:
        return
    try:
        js.delete_consumer(oc.stream_name, name, timeout=2.0)
    except NatsError:
        pass  # ephemeral with an inactive_threshold: the server drops it anyway


def _seq_at_time(js: JetStream, ropts: ReadOptions, when: datetime, info: StreamInfo) -> int:
    """The first sequence (of the filter) stored at or after ``when``; last_seq + 1 if none."""
    if info.config.allow_direct and not ropts.subjects:
        try:
            return js.stream(ropts.stream, timeout=_INFO_TIMEOUT).direct_get(start_time=when, timeout=_INFO_TIMEOUT).seq
        except MsgNotFoundError:
            return info.state.last_seq + 1
    oc = js.ordered_consumer(
        ropts.stream,
        filter_subjects=list(ropts.subjects) or None,
        deliver_policy="by_start_time",
        opt_start_time=when,
    )
    try:
        msgs = oc.fetch(1, no_wait=True, expires=None)
    except NoMessagesError:
        msgs = []
    finally:
        _close_ordered(js, oc)
    if msgs:
        return msgs[0].metadata.sequence.stream
    return info.state.last_seq + 1


def _resolve_start(js: JetStream, ropts: ReadOptions, info: StreamInfo) -> int:
    """The first sequence to read, from startingTimestamp / startingOffsets."""
    if ropts.starting_time is not None:
        return _seq_at_time(js, ropts, ropts.starting_time, info)
    if ropts.starting == "earliest":
        return _first_available(info)
    if ropts.starting == "latest":
        return info.state.last_seq + 1
    assert isinstance(ropts.starting, int)
    return ropts.starting


def _loss_message(stream: str, start: int, first: int) -> str:
    return (
        f"stream {stream!r}: sequences {start}..{first - 1} are no longer in the stream (purged, deleted "
        f"or aged out; the first available sequence is {first}). Set failOnDataLoss=false to skip them."
    )


def _stamp_array(stamps: Sequence[int | str | datetime], type_: Any) -> Any:
    """The Arrow timestamp column (``type_``, microseconds in UTC, truncated) of a batch's times
    (:data:`Record`). Nanoseconds (an ordered consumer's) are divided in one call, as are RFC
    3339 texts (direct gets) parsed; the rest (datetimes, a mix, nanoseconds past int64, texts
    outside Arrow's nanosecond range or before 1970, where its cast would round up) become
    microseconds one by one."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if stamps and all(s.__class__ is int for s in stamps):
        try:
            ns = pa.array(stamps, type=pa.int64())  # (u64 stamps past int64's range go one by one)
        except (pa.ArrowInvalid, OverflowError):
            ns = None
        if ns is not None and pc.min(ns).as_py() >= 0:
            return pc.divide(ns, 1000).cast(type_)  # (integer division, rounding down as _micros does)
    if stamps and all(s.__class__ is str for s in stamps):
        try:
            exact = pa.array(stamps, type=pa.string()).cast(pa.timestamp("ns", tz="UTC"))
        except (pa.ArrowInvalid, OverflowError):
            exact = None
        if exact is not None and pc.min(exact.cast(pa.int64())).as_py() >= 0:
            return exact.cast(type_, safe=False)
    return pa.array([_micros(s) for s in stamps], type=type_)


def _ns_stamp_array(ns: Any, type_: Any) -> Any:
    """:func:`_stamp_array` of nanosecond stamps given as an Arrow ``uint64`` array (a run read
    in bulk), without a Python int each while they fit in int64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(ns) and pc.max(ns).as_py() > 2**63 - 1:
        return _stamp_array(ns.to_pylist(), type_)
    return pc.divide(ns.cast(pa.int64()), 1000).cast(type_)


def _micros(stamp: int | str | datetime) -> int:
    """Microseconds since the epoch, rounded down (as the microseconds of a datetime are)."""
    if isinstance(stamp, int):
        return stamp // 1000
    return unix_ns(_stamp_value(stamp)) // 1000


def _stamp_value(stamp: int | str | datetime) -> datetime:
    if isinstance(stamp, str):
        return parse_server_stamp(stamp)
    if isinstance(stamp, int):
        return from_unix_ns(stamp)
    return stamp


def _headers_array(items: Sequence[Headers | str | None], type_: Any) -> Any:
    """The Arrow map column (``type_``) of a batch's headers (:data:`Record`), built from the
    columns :func:`jscore.headers.header_columns` gives (lists of keys and values and their
    offsets, not a dict per message for Arrow to convert)."""
    import pyarrow as pa

    counts, keys, value_counts, values = header_columns(items)
    offsets: Any
    if counts.count(1) == len(counts):  # (one key each: a writer's msg id)
        offsets = _count_up(len(counts))
    else:
        built: list[int | None] = []
        at = 0
        for c in counts:
            if c is None:
                built.append(None)  # (a null offset: no headers, a null map)
            else:
                built.append(at)
                at += c
        built.append(at)
        offsets = pa.array(built, type=pa.int32())
    if value_counts is None:
        value_offsets = _count_up(len(values))
    else:
        total = 0
        running = [0]
        for c in value_counts:
            total += c
            running.append(total)
        value_offsets = pa.array(running, type=pa.int32())
    string = pa.string()
    if keys and keys.count(keys[0]) == len(keys):  # (one key name throughout: made in one call)
        key_array = pa.repeat(pa.scalar(keys[0], string), len(keys))
    else:
        key_array = pa.array(keys, type=string)
    lists = pa.ListArray.from_arrays(value_offsets, pa.array(values, type=string), type=type_.item_type)
    return pa.MapArray.from_arrays(offsets, key_array, lists, type=type_)


def _one_key_headers_array(key: str, values: Any, type_: Any) -> Any:
    """:func:`_headers_array` of headers that are each one line ``key: value`` (``values`` an
    Arrow string array, one each), made in a few calls."""
    import pyarrow as pa

    n = len(values)
    ones = _count_up(n)
    key_array = pa.repeat(pa.scalar(key, pa.string()), n)
    lists = pa.ListArray.from_arrays(ones, values.cast(pa.string()), type=type_.item_type)
    return pa.MapArray.from_arrays(ones, key_array, lists, type=type_)


@functools.lru_cache(maxsize=8)
def _count_up(n: int) -> Any:
    """The Arrow int32 array ``0, 1, ..., n`` (the offsets of ``n`` items of one each), built in C
    (and kept for the next batch of as many rows: Arrow arrays do not change)."""
    import pyarrow as pa

    if array.array("i").itemsize != 4:  # (a C int of another size: element by element)
        return pa.array(range(n + 1), type=pa.int32())
    return pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(array.array("i", range(n + 1)))])


def _headers_dict(headers: Headers | str | None) -> dict[str, list[str]] | None:
    if isinstance(headers, str):
        return header_lines_dict(headers)
    if headers is None:
        return None
    return headers_dict(headers)


def iter_range(
    js: JetStream, stream: str, subjects: Sequence[str], start: int, end: int, fetch_batch: int = DEFAULT_FETCH_BATCH
) -> Generator[JsMsg, None, None]:
    """Every stored message (of ``subjects``, if any) with a sequence in ``[start, end]``, in
    order, read with an ordered consumer that is deleted at the end (also when the caller stops
    early). Stops by sequence; a short no-wait pull or ``num_pending == 0`` ends it early. Each
    no-wait pull asks for ``fetch_batch`` messages (:data:`DEFAULT_FETCH_BATCH`, 4096), which it
    holds until they are taken: lower it for large messages."""
    return _one_by_one(_iter_ordered(js, stream, subjects, start, end, fetch_batch, records=False))


def _one_by_one(batches: Generator[list[_T], None, None]) -> Generator[_T, None, None]:
    """The items of ``batches`` one at a time; closing this closes ``batches`` at once (also when
    the caller stops early: a read's ordered consumer is deleted then, not when collected)."""
    try:
        for items in batches:
            yield from items
    finally:
        batches.close()


def _iter_ordered(
    js: JetStream,
    stream: str,
    subjects: Sequence[str],
    start: int,
    end: int,
    fetch_batch: int,
    *,
    records: bool,
    columns: bool = False,
    max_bytes: int | None = None,
) -> Generator[Any, None, None]:
    """:func:`iter_range` a fetch at a time: lists of messages or (``records``) of
    :data:`Record` tuples, taken from the ordered consumer's runs without a :class:`JsMsg` each;
    with ``columns`` too, runs the connection read in bulk come as they are among the tuples
    (:class:`jscore.bulk.DeliveryColumns`). With ``max_bytes`` (``records`` only) each pull
    also stops at that many bytes (:class:`jscore.ordered.RangePulls` sizes the pulls: what
    comes after one that brings nothing or that the server refuses)."""
    oc = js.ordered_consumer(
        stream,
        filter_subjects=list(subjects) or None,
        deliver_policy="by_start_sequence",
        opt_start_seq=max(1, start),
    )
    pulls = RangePulls(fetch_batch, max_bytes or 0, DEFAULT_FETCH_BATCH)
    try:
        cursor = start - 1
        empties = 0
        while cursor < end:
            want, limit = pulls.ask(end - cursor)
            resets = oc.state.resets
            items: list[Any]
            try:
                if records:
                    items, pending = oc._fetch_records(want, no_wait=True, expires=None, columns=columns, max_bytes=limit)
                else:
                    items = oc.fetch(want, no_wait=True, expires=None)
                    pending = items[-1].metadata.num_pending if items else None
            except NoMessagesError:
                items, pending = [], None
                resets = -1  # (waiting to recreate its server consumer: try again)
            except MaxBytesExceededError:
                if limit is None:
                    raise
                items, pending = [], None  # (the next message is over the limit)
            except PullRequestLimitError as exc:
                if not pulls.refused(exc.description):
                    raise
                _log.info(
                    "jetstream[%s]: the server refused a read pull (%s); pulls of %d messages follow",
                    stream, exc, pulls.batch,
                )  # fmt: skip
                continue
            if not items:
                if oc.state.resets == resets:
                    if pulls.nothing():
                        continue
                    return  # nothing more in the stream for this filter
                empties += 1
                if empties > _MAX_EMPTY_RETRIES:
                    raise JetStreamError(
                        f"stream {stream!r}: the ordered consumer kept resetting while reading "
                        f"sequences {cursor + 1}..{end}"
                    )
                continue
            empties = 0
            pulls.brought()
            last: int = _seq_of(items[-1], records)
            if last > end:  # (in order: keep those up to the end)
                yield [kept for item in items if (kept := _up_to(item, end, records)) is not None]
                return
            yield items
            cursor = last
            if pending == 0:
                return
    finally:
        _close_ordered(js, oc)


def _seq_of(item: Any, record: bool, first: bool = False) -> int:
    """The stream sequence of a message, a record, or the last (``first``: first) of a run
    read in bulk."""
    if item.__class__ is DeliveryColumns:
        return item.seqs[0 if first else -1]
    return item[3] if record else item.metadata.sequence.stream  # type: ignore[no-any-return]


def _up_to(item: Any, end: int, record: bool) -> Any:
    """``item`` if its sequence is at most ``end``; of a run read in bulk, those of it that are
    (None: none)."""
    if item.__class__ is DeliveryColumns:
        k = bisect_right(item.seqs, end)
        return item.head(k) if k else None
    return item if _seq_of(item, record) <= end else None


def read_range(config: NatsConfig, ropts: ReadOptions, part: SeqRange) -> Iterator[tuple[Any, ...]]:
    """The rows of one partition: every stored message of the filter with a sequence in
    ``[part.start, part.end]``, as tuples of :data:`SCHEMA` (see :func:`iter_range`)."""
    stream = ropts.stream
    for subject, data, headers, seq, time in _range_records(config, ropts, part):
        yield (subject, data, _headers_dict(headers), stream, seq, _stamp_value(time))


ARROW_BATCH_ROWS: Final = 16384
"""Rows per Arrow record batch handed to Spark by the readers, at most (see
:data:`ARROW_BATCH_BYTES`). Each batch costs the task and the JVM a few dozen Arrow calls
whatever its length: a Spark read of 128-byte messages spent 0.2 us a row less in its
workers with 16,384 than with 4,096."""

DECODED_BATCH_ROWS: Final = 4096
"""Rows per Arrow record batch of a read that decodes its payloads (:func:`read_range_decoded`,
whose rows are Python values until a batch is built), at most (see :data:`ARROW_BATCH_BYTES`)."""

ARROW_BATCH_BYTES: Final = 8 << 20
"""Bytes of messages (about: as the server counts them, or their subjects and payloads) from which :func:`read_range_arrow` hands over
what it holds though fewer than :data:`ARROW_BATCH_ROWS` rows: a task's batches stay within
about this much whatever the messages' size."""


_RECORD_COLUMNS: Final = tuple(itemgetter(i) for i in range(5))
"""What takes each column of a :data:`Record` (subject, payload, headers, sequence, time)."""


def _arrow_schema() -> Any:
    """:data:`SCHEMA` as the Arrow schema Spark expects from a Python source (built by PySpark's
    own converter, whose signature differs between 4.0 and 4.2+)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    struct = StructType(
        [
            StructField("subject", StringType()),
            StructField("data", BinaryType()),
            StructField("headers", MapType(StringType(), ArrayType(StringType()))),
            StructField("stream", StringType()),
            StructField("seq", LongType()),
            StructField("timestamp", TimestampType()),
        ]
    )
    try:
        return to_arrow_schema(struct, timezone="UTC")
    except TypeError:  # PySpark 4.0 / 4.1: timestamp_utc=True is the default
        return to_arrow_schema(struct)


def read_range_arrow(config: NatsConfig, ropts: ReadOptions, part: SeqRange, rows: int | None = None) -> Iterator[Any]:
    """:func:`read_range` as Arrow record batches of at most ``rows`` rows: Spark takes them as
    they are, instead of converting a Python tuple per row (what the readers return). Runs of
    deliveries the connection read in bulk (:class:`jscore.bulk.DeliveryColumns`) become
    columns without a Python object per message."""
    import pyarrow as pa

    rows = ARROW_BATCH_ROWS if rows is None else max(1, rows)
    schema = _arrow_schema()
    types = [f.type for f in schema]
    stream = ropts.stream

    def batch(records: list[Record]) -> Any:
        # (the columns, in C: a pass per column makes no iterator per record, as zip(*records)
        # would, that the garbage collector counts)
        subjects, datas, headers, seqs, stamps = [list(map(column, records)) for column in _RECORD_COLUMNS]
        return columns_batch(
            pa.array(subjects, type=types[0]), pa.array(datas, type=types[1]), _headers_array(headers, types[2]), seqs,
            _stamp_array(stamps, types[5]),
        )  # fmt: skip

    def bulk_batch(run: DeliveryColumns) -> Any:
        one = run.one_key_values(pa.string())
        if one is not None:
            headers = _one_key_headers_array(one[0], one[1], types[2])
        else:
            lines = run.header_lines()
            headers = _headers_array([None] * run.count if lines is None else lines, types[2])
        subjects, datas = run.subject_array(types[0]), run.payload_array(types[1])
        return columns_batch(subjects, datas, headers, run.seqs, _ns_stamp_array(run.stamp_array(), types[5]))

    def columns_batch(subjects: Any, datas: Any, headers: Any, seqs: list[int], stamps: Any) -> Any:
        arrays = [
            subjects,
            datas,
            headers,
            pa.repeat(pa.scalar(stream, types[3]), len(seqs)),
            pa.array(seqs, type=types[4]),
            stamps,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    # Runs read in bulk are joined (bulk.joined) and made into columns once for a batch's rows,
    # not once a run: a run is a socket read's worth (some hundreds of rows), and each column
    # costs a few Arrow calls whatever its length.
    made: list[Any] = []  # record batches not handed over yet, fewer than ``rows`` rows in all
    count = 0  # rows in made, held and runs
    size = 0  # about the bytes of made, held and runs (runs as the server counts them)
    held: list[Record] = []  # record tuples after made, not made yet
    runs: list[DeliveryColumns] = []  # runs after made (of one consumer, all HMSG or all MSG), not made yet

    def make_runs() -> None:
        if runs:
            made.append(bulk_batch(bulk.joined(runs)))
            runs.clear()

    batches = _range_batches(config, ropts, part, columns=True)
    try:
        for items in batches:
            for item in items:
                if item.__class__ is DeliveryColumns:
                    if held:
                        made.append(batch(held))
                        held = []
                    if runs and (runs[0].headed is not item.headed or runs[0].consumer != item.consumer):
                        make_runs()
                    runs.append(item)
                    count += item.count
                    size += item.size
                else:
                    make_runs()
                    held.append(item)
                    count += 1
                    size += len(item[0]) + len(item[1])
            if count < rows and size < ARROW_BATCH_BYTES:
                continue
            if count < rows:  # (large messages: what is held goes now, in one batch)
                if held:
                    made.append(batch(held))
                    held = []
                make_runs()
                full, rest, _ = _rebatch(made, rows, schema)
                yield from full
                yield from rest
                made, count, size = [], 0, 0
                continue
            if runs and not made and not held:  # (only runs: batches of ``rows`` rows from them joined)
                run = bulk.joined(runs)
                runs.clear()
                while run.count >= rows:
                    yield bulk_batch(run.head(rows))
                    if run.count == rows:
                        break
                    run = run.tail(rows)
                else:
                    runs.append(run)
                count = sum(r.count for r in runs)
                size = sum(r.size for r in runs)
                continue
            if held:
                made.append(batch(held))
                held = []
            make_runs()
            full, made, count = _rebatch(made, rows, schema)
            size = sum(b.nbytes for b in made)
            yield from full
    finally:
        batches.close()
    if held:
        made.append(batch(held))
    make_runs()
    if made:
        full, rest, _ = _rebatch(made, rows, schema)
        yield from full
        yield from rest


def _rebatch(made: list[Any], rows: int, schema: Any) -> tuple[list[Any], list[Any], int]:
    """The record batches ``made`` (in order) as batches of ``rows`` rows, and what is left: ``(full batches, the rest as a list, its rows)``."""
    import pyarrow as pa

    whole = pa.Table.from_batches(made, schema=schema)
    return _cut(whole.combine_chunks() if len(made) > 1 else whole, rows)


def _cut(table: Any, rows: int) -> tuple[list[Any], list[Any], int]:
    """``table``'s rows as record batches of ``rows`` rows, and the rest: ``(full batches, the
    rest as batches, its rows)``. A column Arrow keeps in several chunks (combining them stops
    short of 2 GiB) makes a slice several batches, each within ``rows``."""
    n = table.num_rows
    done = n - n % rows
    full = [b for start in range(0, done, rows) for b in table.slice(start, rows).to_batches()]
    return full, (table.slice(done).to_batches() if done < n else []), n - done


def _spark_type(t: Any) -> Any:
    """A :data:`jssync.spark._values.DType` -> the pyspark type."""
    from pyspark.sql import types as T

    atomic = {
        "string": T.StringType,
        "binary": T.BinaryType,
        "boolean": T.BooleanType,
        "byte": T.ByteType,
        "short": T.ShortType,
        "int": T.IntegerType,
        "long": T.LongType,
        "float": T.FloatType,
        "double": T.DoubleType,
        "date": T.DateType,
        "timestamp": T.TimestampType,
        "timestamp_ntz": T.TimestampNTZType,
    }
    if isinstance(t, str):
        return atomic[t]()
    if t[0] == "decimal":
        return T.DecimalType(t[1], t[2])
    if t[0] == "array":
        return T.ArrayType(_spark_type(t[1]))
    if t[0] == "map":
        return T.MapType(_spark_type(t[1]), _spark_type(t[2]))
    return T.StructType([T.StructField(f.name, _spark_type(f.type), f.nullable) for f in t[1]])


def spark_schema(ropts: ReadOptions) -> StructType:
    """The read's schema as a pyspark StructType (:meth:`ReadOptions.columns`)."""
    return _spark_type(("struct", ropts.columns()))  # type: ignore[no-any-return]


def _to_arrow(struct: StructType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(struct, timezone="UTC")
    except TypeError:  # PySpark 4.0 / 4.1: timestamp_utc=True is the default
        return to_arrow_schema(struct)


def check_user_schema(given: StructType, ropts: ReadOptions) -> None:
    """A schema given with ``.schema(...)`` must be the read's own (names and types; nullability
    is not compared): the source cannot produce other columns. Raises :class:`InvalidOptionError`."""
    want = ropts.columns()
    if isinstance(given, str):  # (a DDL string, when called outside Spark)
        if [(f.name.lower(), f.type) for f in parse_ddl(given, "schema")] == [(f.name.lower(), f.type) for f in want]:
            return
        given_text = given
    else:

        def shape(st: Any) -> list[tuple[str, str]]:
            return [(f.name.lower(), f.dataType.simpleString()) for f in st.fields]

        if shape(given) == shape(spark_schema(ropts)):
            return
        given_text = given.simpleString()
    hint = (
        " (decode the payload into columns with valueFormat=json and valueSchema)"
        if ropts.value_format == "binary"
        else " (the payload's columns come from valueSchema)"
    )
    raise InvalidOptionError(
        f"schema: the jetstream source returns {ddl(want)!r}, not {given_text!r}{hint}; "
        "leave .schema() out, or select and cast the columns after load()"
    )


def read_range_decoded(config: NatsConfig, ropts: ReadOptions, part: SeqRange, rows: int | None = None) -> Iterator[Any]:
    """The rows of one partition as Arrow record batches in the read's columns
    (:meth:`ReadOptions.columns`) when they are not the default: payloads decoded on the worker
    with ``valueFormat`` / ``valueSchema``, malformed ones handled by ``mode``."""
    import pyarrow as pa

    rows = DECODED_BATCH_ROWS if rows is None else rows
    cols = ropts.columns()
    schema = _to_arrow(spark_schema(ropts))
    types = [f.type for f in schema]
    fmt = ropts.value_format
    decoder = ValueDecoder(fmt, ropts.decoded_fields(), ropts.mode) if fmt != "binary" else None
    meta_names = ("subject", "data", "headers", "stream", "seq", "timestamp")
    value_names = [f.name for f in ropts.decoded_fields()] if fmt == "json" else (["data"] if fmt == "string" else [])
    if decoder is not None and decoder.permissive:
        value_names.append(ropts.corrupt_column)
    # Where each decoded value and each message column goes in the output.
    lower = [c.name.lower() for c in cols]
    value_at = [lower.index(n.lower()) for n in value_names]
    meta_at = [(lower.index(n), n) for n in meta_names if n in lower and n.lower() not in {v.lower() for v in value_names}]
    columns: list[list[Any]] = [[] for _ in cols]
    stream = ropts.stream
    count = 0
    size = 0  # bytes of the payloads and subjects in columns

    stamp_at = next((i for i, name in meta_at if name == "timestamp"), -1)

    def batch() -> Any:
        arrays = [
            _stamp_array(c, types[i]) if i == stamp_at else pa.array(c, type=types[i]) for i, c in enumerate(columns)
        ]
        for c in columns:
            c.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for subject, data, headers, seq, time in _range_records(config, ropts, part):
        if decoder is not None:
            try:
                values = decoder.decode(data)
            except _Bad as exc:
                raise MalformedRecordError(
                    f"jetstream[{stream}]: malformed payload at sequence {seq} (subject "
                    f"{subject!r}): {exc}. mode=FAILFAST; mode=PERMISSIVE keeps it (null columns and the payload "
                    f"in {ropts.corrupt_column!r}), mode=DROPMALFORMED drops it"
                ) from None
            if values is DROP:
                continue
            assert isinstance(values, list)
            for i, v in zip(value_at, values):
                columns[i].append(v)
        for i, name in meta_at:
            if name == "subject":
                columns[i].append(subject)
            elif name == "data":
                columns[i].append(data)
            elif name == "headers":
                columns[i].append(_headers_dict(headers))
            elif name == "stream":
                columns[i].append(stream)
            elif name == "seq":
                columns[i].append(seq)
            else:
                columns[i].append(time)
        count += 1
        size += len(data) + len(subject)
        if count >= rows or size >= ARROW_BATCH_BYTES:
            count = size = 0
            yield batch()
    if count:
        yield batch()


def read_partition(config: NatsConfig, ropts: ReadOptions, part: SeqRange) -> Iterator[Any]:
    """A read task's Arrow record batches: the fast path for the default columns, else decoded."""
    if ropts.plain:
        return read_range_arrow(config, ropts, part)
    return read_range_decoded(config, ropts, part)


Record = tuple[str, bytes, "Headers | str | None", int, "int | str | datetime"]
"""A message read by a task: subject, payload, its own headers, stream sequence, time stored.
The headers are usually the text of the header lines (from a direct get,
:data:`jscore.jsapi.StoredRow`; from an ordered consumer, :func:`jscore.headers.bulk_headers`),
else :class:`Headers`. The time is RFC 3339 text from a direct get, nanoseconds since the epoch
from an ordered consumer (from the ack subject). The columns are built from them without a Python object per
message (:func:`_headers_array`, :func:`_stamp_array`)."""


def iter_range_records(*args: Any, **kwargs: Any) -> Generator[Record, None, None]:
    """:func:`iter_range_batches` (the same arguments) one :data:`Record` at a time."""
    return _one_by_one(iter_range_batches(*args, **kwargs))


def iter_range_batches(
    js: JetStream,
    stream: str,
    subjects: Sequence[str],
    start: int,
    end: int,
    batch: int | None = None,
    direct: bool = False,
    *,
    _columns: bool = False,
) -> Generator[list[Record], None, None]:
    """:func:`iter_range` as lists of :data:`Record` tuples, one per fetch or direct get
    request (no Python step per message between the client and the column builder). With ``direct`` (the ``directGet`` option),
    read with batched direct gets (:class:`jscore.directget.DirectRange`) when the stream has
    ``allow_direct`` and the filter is at most one subject: no consumer on the server, one
    request per ``batch`` messages (:data:`DIRECT_BATCH`), a little more client CPU per message
    than an ordered consumer and about three times the server's. What direct gets cannot vouch for (a batch that ends before the
    range does, a reply from a mirror, a direct get that fails) is read from the stream's leader
    with an ordered consumer, from where the direct gets stopped."""
    cursor = start
    info = js.stream_info(stream, timeout=_INFO_TIMEOUT) if direct and len(subjects) <= 1 else None
    if info is not None and info.config.allow_direct:
        plan = DG.DirectRange(stream, start, end, batch or DIRECT_BATCH)
        handle = Stream(js, info)
        subject = subjects[0] if subjects else None
        take = plan.take
        while (ask := plan.request()) is not None:
            seq, count = ask
            rows: list[Record] = []
            try:
                with handle._direct_rows(
                    seq, next_by_subject=subject, batch=count, max_bytes=DIRECT_MAX_BYTES, timeout=js.timeout
                ) as it:
                    for subj, seq, data, headers, stamp, from_stream in it:
                        if not take(from_stream, seq):
                            break
                        rows.append((subj, data, headers, seq, stamp))
                    else:
                        plan.batch_ended(len(rows), it.num_pending)
            except NatsError as exc:
                _log.warning(
                    "jetstream[%s]: a direct get failed (%s: %s); sequences %d..%d are read with an ordered consumer",
                    stream, type(exc).__name__, exc, plan.cursor + 1, end,
                )  # fmt: skip
                plan.failed()
            if rows:  # (those taken before a failure too: the plan's cursor is past them)
                yield rows
        if not plan.fallback:
            return
        cursor = plan.cursor + 1
    if batch is None:  # (pulls of many small messages, or fewer larger ones)
        batch, max_bytes = READ_FETCH_BATCH, read_fetch_bytes(js.client.max_payload)
    else:
        max_bytes = None
    yield from _iter_ordered(js, stream, subjects, cursor, end, batch, records=True, columns=_columns, max_bytes=max_bytes)


def _range_records(config: NatsConfig, ropts: ReadOptions, part: SeqRange) -> Generator[Record, None, None]:
    """:func:`_range_batches` one :data:`Record` at a time."""
    return _one_by_one(_range_batches(config, ropts, part))


def _range_batches(
    config: NatsConfig, ropts: ReadOptions, part: SeqRange, columns: bool = False
) -> Generator[list[Any], None, None]:
    """The messages of one partition (see :func:`iter_range_batches`), with the data-loss
    checks and the cached client dropped when the connection broke. With ``columns``, runs the
    connection read in bulk come as they are among the records (see :func:`_iter_ordered`)."""
    stream = ropts.stream
    check = part.check_loss and ropts.fail_on_data_loss
    with lease(config) as client:
        js = get_jetstream(config)
        failed = True
        try:
            first_seen: int | None = None
            own: tuple[str, ...] | None = getattr(part, "subjects", None)
            subjects = own if own is not None else ropts.subjects
            batches = iter_range_batches(
                js, stream, subjects, part.start, part.end, ropts.fetch_batch, ropts.direct_get, _columns=columns
            )
            for records in batches:
                if first_seen is None and records:
                    first_seen = _seq_of(records[0], True, first=True)
                    if check and first_seen > part.start:
                        _check_loss(js, stream, part.start)
                yield records
            if first_seen is None and check:
                _check_loss(js, stream, part.start)
            failed = False
        finally:
            if failed and (client.is_closed or not client.is_connected):
                # A broken connection must not serve the retry of this task.
                discard_client(config, client)


def _check_direct(ropts: ReadOptions, info: StreamInfo) -> None:
    """``directGet`` needs a stream with ``allow_direct`` (:class:`InvalidOptionError`, on the
    driver, before any task runs)."""
    if ropts.direct_get and not info.config.allow_direct:
        raise InvalidOptionError(
            f"directGet: stream {ropts.stream!r} does not allow direct gets (its allow_direct is false); "
            "set allow_direct on the stream, or leave directGet out to read with ordered consumers"
        )


def _check_loss(js: JetStream, stream: str, start: int) -> None:
    info = _stream_info(js, stream)
    first = _first_available(info)
    if start < first:
        raise DataLossError(_loss_message(stream, start, first))


# ====================================================================== batch read


class JetStreamBatchReader(DataSourceReader):
    def __init__(self, config: NatsConfig, ropts: ReadOptions) -> None:
        self.config = config
        self.ropts = ropts

    def partitions(self) -> Sequence[InputPartition]:
        ropts = self.ropts
        with lease(self.config):
            js = get_jetstream(self.config)
            info = _stream_info(js, ropts.stream)
            _check_direct(ropts, info)
            start = _resolve_start(js, ropts, info)
            counts = _subject_counts(js, ropts) if ropts.partition_by == "subject" else None
        first = _first_available(info)
        if start < first:
            if ropts.fail_on_data_loss and ropts.starting_time is None and isinstance(ropts.starting, int):
                raise DataLossError(_loss_message(ropts.stream, start, first))
            start = first
        end = info.state.last_seq
        if ropts.ending is not None:
            end = min(end, ropts.ending - 1)
        if counts is not None:
            parts = split_by_subject(
                counts,
                start,
                end,
                min_partitions=ropts.min_partitions,
                max_records_per_partition=ropts.max_records_per_partition,
            )
        else:
            parts = split_range(
                start,
                end,
                min_partitions=ropts.min_partitions,
                max_records_per_partition=ropts.max_records_per_partition,
            )
        _log.info(
            "jetstream[%s] batch read: sequences %d..%d in %d partitions (by %s)",
            ropts.stream,
            start,
            end,
            len(parts),
            ropts.partition_by,
        )
        if not parts:
            return [SeqRange(0, start, start - 1)]  # (one empty task: Spark wants a partition)
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SeqRange)
        return read_partition(self.config, self.ropts, partition)


# ====================================================================== streaming read


def _offset_seq(offset: Any, what: str) -> int:
    if isinstance(offset, str):
        offset = json.loads(offset)
    if not isinstance(offset, dict) or not isinstance(offset.get("seq"), int):
        raise JetStreamError(f'jetstream: unexpected {what} offset {offset!r} (expected {{"seq": N}})')
    return int(offset["seq"])


class JetStreamStreamReader(DataSourceStreamReader, _AvailableNowBase):  # type: ignore[misc]
    """Micro-batches as sequence ranges ``[start, end)``; offsets ``{"seq": next_seq}``."""

    def __init__(self, config: NatsConfig, ropts: ReadOptions) -> None:
        self.config = config
        self.ropts = ropts
        self._target: int | None = None  # Trigger.AvailableNow: do not go past this offset
        self._last_end: int | None = None  # (PySpark 4.0 / 4.1: latestOffset() has no start)
        self._last_start: int | None = None  # the start of the micro-batch planned last
        self._last_info: StreamInfo | None = None  # the info latestOffset saw (for reportLatestOffset)

    def _info(self) -> tuple[JetStream, StreamInfo]:
        js = get_jetstream(self.config)
        info = _stream_info(js, self.ropts.stream)
        _check_direct(self.ropts, info)
        return js, info

    def initialOffset(self) -> dict[str, int]:
        with lease(self.config):
            js, info = self._info()
            seq = _resolve_start(js, self.ropts, info)
        return {"seq": max(1, seq)}

    def getDefaultReadLimit(self) -> Any:
        n = self.ropts.max_records_per_trigger
        if n is not None and _ReadMaxRows is not None:
            return _ReadMaxRows(n)
        if _ReadAllAvailable is not None:
            return _ReadAllAvailable()
        # PySpark 4.0 / 4.1: no ReadLimit classes and no getDefaultReadLimit on the base class
        # (Spark never asks a Python source for one there).
        return None  # pragma: no cover

    def prepareForTriggerAvailableNow(self) -> None:
        with lease(self.config):
            _, info = self._info()
        self._target = info.state.last_seq + 1
        _log.info("jetstream: Trigger.AvailableNow reads %r up to sequence %d", self.ropts.stream, self._target - 1)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The stream's latest offset for the query's progress (PySpark >= 4.2 calls it right
        after :meth:`latestOffset`; it shows as ``sources[i].latestOffset`` of
        ``query.lastProgress``), carrying the source's figures, since the Python data source API
        has no other way to report source metrics: ``stream``, ``latestSeq`` (the stream's last
        sequence), ``batchSequences`` (sequences in the micro-batch just planned; with a subject
        filter or deleted messages more than its rows, which are ``numInputRows``),
        ``offsetsBehindLatest`` (sequences left after it) and ``estimatedBytesBehindLatest``
        (those at the stream's average message size). Only ``seq`` is an offset; Spark keeps
        none of this in the checkpoint."""
        info = self._last_info
        if info is None:
            with lease(self.config):
                _, info = self._info()
        latest = info.state.last_seq + 1
        out: dict[str, Any] = {"seq": latest, "stream": self.ropts.stream, "latestSeq": info.state.last_seq}
        if self._last_end is not None:
            behind = max(0, latest - self._last_end)
            state = info.state
            avg = state.bytes / state.messages if state.messages else 0.0
            out["batchSequences"] = max(0, self._last_end - self._last_start) if self._last_start is not None else None
            out["offsetsBehindLatest"] = behind
            out["estimatedBytesBehindLatest"] = round(behind * avg)
        self._last_info = None
        return out

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, int]:
        """The end offset of the next micro-batch: the stream's last sequence + 1, capped by the
        read limit (``maxRecordsPerTrigger``, counted in sequences, so a batch never has more
        rows than that) and by the Trigger.AvailableNow target. Both signatures: PySpark >= 4.2
        passes ``(start, limit)``; 4.0 / 4.1 pass nothing (the start is then the end this reader
        returned last, and ``maxRecordsPerTrigger`` applies from the second batch on).

        The first argument-less call of a run is deliberately not capped: PySpark 4.0 calls it
        *before* ``initialOffset()`` on a new query, and runs Trigger.AvailableNow on a Python
        source (which it wraps, calling neither ``prepareForTriggerAvailableNow`` nor
        ``getDefaultReadLimit``) as one batch up to the offset of a single ``latestOffset()``
        call, so a capped first call would end an AvailableNow run before the backlog is read."""
        with lease(self.config):
            _, info = self._info()
        available = info.state.last_seq + 1
        if self._target is not None:
            available = min(available, self._target)
        first = _first_available(info)
        max_rows: int | None = None
        min_rows: int | None = None
        if start is None:
            s = self._last_end
            max_rows = self.ropts.max_records_per_trigger
        else:
            s = _offset_seq(start, "start")
            if limit is None:
                max_rows = self.ropts.max_records_per_trigger
            elif _ReadMaxRows is not None and isinstance(limit, _ReadMaxRows):
                max_rows = limit.max_rows
            elif _ReadMinRows is not None and isinstance(limit, _ReadMinRows):
                min_rows = limit.min_rows
        self._last_info = info
        if s is None:
            end = available
            self._last_start = None
        else:
            if s > info.state.last_seq + 1:
                msg = (
                    f"stream {self.ropts.stream!r}: the checkpointed sequence {s} is past the stream's last "
                    f"sequence {info.state.last_seq} (was the stream deleted and re-created?)"
                )
                if self.ropts.fail_on_data_loss:
                    raise DataLossError(msg + " Set failOnDataLoss=false to continue from the checkpoint.")
                _log.warning("jetstream: %s", msg)
            if s < first:
                if self.ropts.fail_on_data_loss:
                    raise DataLossError(_loss_message(self.ropts.stream, s, first))
                _log.warning("jetstream: %s (skipped: failOnDataLoss=false)", _loss_message(self.ropts.stream, s, first))
                s_eff = first
            else:
                s_eff = s
            end = available
            if max_rows is not None:
                end = min(end, s_eff + max_rows)
            if min_rows is not None and end - s_eff < min_rows:
                end = s
            end = max(end, s)
            self._last_start = s
        self._last_end = end
        return {"seq": end}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s = _offset_seq(start, "start")
        e = _offset_seq(end, "end")
        if e <= s:
            return []
        with lease(self.config):
            _, info = self._info()
        first = _first_available(info)
        if s < first:
            if self.ropts.fail_on_data_loss:
                raise DataLossError(_loss_message(self.ropts.stream, s, first))
            _log.warning("jetstream: %s (skipped: failOnDataLoss=false)", _loss_message(self.ropts.stream, s, first))
            s = first
        return split_range(
            s,
            e - 1,
            min_partitions=self.ropts.min_partitions,
            max_records_per_partition=self.ropts.max_records_per_partition,
            check_loss=True,
        )

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SeqRange)
        return read_partition(self.config, self.ropts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the offsets live in Spark's checkpoint; nothing is kept on the server


# ====================================================================== writers


@dataclass(frozen=True)
class JetStreamCommitMessage(WriterCommitMessage):
    """What a write task reports to the driver: its partition and how many rows it published
    (acknowledged, duplicates included)."""

    partition_id: int
    count: int
    write_id: str = ""


def _task_context() -> Any:
    from pyspark import TaskContext

    return TaskContext.get()


_DRIVER_CHECKED: dict[tuple[NatsConfig, WriteOptions], WriteOptions] = {}


def _check_on_driver(config: NatsConfig, wopts: WriteOptions, *, columns: bool) -> WriteOptions:
    """:func:`jssync.spark._writer.check_targets` on the driver, before any task runs: the
    subject(s) captured, the subject-mode stream settings, the duplicate window (its warning is
    given here, once; the tasks skip the checks). A streaming sink's writer is created again for
    every micro-batch's commit: the check is remembered per process."""
    from ._writer import check_targets

    key = (config, wopts)
    done = _DRIVER_CHECKED.get(key)
    if done is not None:
        return done
    with lease(config) as client:
        checked = check_targets(client, wopts, columns=columns, stacklevel=4)
    if len(_DRIVER_CHECKED) > 256:
        _DRIVER_CHECKED.clear()
    _DRIVER_CHECKED[key] = checked
    return checked


def _describe_tasks(messages: Sequence[WriterCommitMessage | None]) -> str:
    """Per task: the rows it confirmed stored, or that it did not finish."""
    done = [m for m in messages if isinstance(m, JetStreamCommitMessage)]
    rows = sum(m.count for m in done)
    unfinished = [i for i, m in enumerate(messages) if not isinstance(m, JetStreamCommitMessage)]
    parts = [f"partition {m.partition_id}: {m.count}" for m in done[:20]]
    if len(done) > 20:
        parts.append(f"... {len(done) - 20} more")
    text = f"{len(done)} of {len(messages)} tasks finished and stored {rows} rows"
    if parts:
        text += f" ({', '.join(parts)})"
    if unfinished:
        text += (
            f"; {len(unfinished)} did not finish (failed or interrupted), and what each stored before that is "
            f"in its own log line 'jetstream write ... partition N failed ... after K of its rows were confirmed "
            f"stored'"
        )
    return text


def _sum_counts(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    rows = tasks = 0
    for m in messages:
        if isinstance(m, JetStreamCommitMessage):
            rows += m.count
            tasks += 1
    return rows, tasks


def plan_write_columns(schema: StructType, wopts: WriteOptions) -> JsonPlan | None:
    """Check the DataFrame's columns on the driver, before any task: the data column (or, for
    ``valueFormat=json``, the columns to serialise), the subject column when no ``subject`` is
    set, the msg id column. Returns the JSON plan (None unless ``valueFormat=json``)."""
    from pyspark.sql import types as T

    by_name = {f.name: f for f in schema.fields}
    names = list(by_name)
    if wopts.subject is None and wopts.subject_column not in by_name:
        raise InvalidOptionError(
            f"subject: no subject option and the DataFrame has no column {wopts.subject_column!r} (columns: {names})"
        )
    if wopts.msg_id_column is not None and wopts.msg_id_column not in by_name:
        raise InvalidOptionError(f"msgIdColumn: the DataFrame has no column {wopts.msg_id_column!r} (columns: {names})")
    if wopts.value_format == "json":
        value = by_name.get("value")
        return json_plan(names, value is not None and isinstance(value.dataType, T.StructType), wopts)
    d = wopts.data_column
    if d not in by_name:
        raise InvalidOptionError(
            f"dataColumn: the DataFrame has no column {d!r} (columns: {names}); set dataColumn, or "
            f"valueFormat=json to serialise the columns"
        )
    dtype = by_name[d].dataType
    if wopts.value_format == "binary" and not isinstance(dtype, (T.BinaryType, T.StringType)):
        raise InvalidOptionError(
            f"dataColumn: column {d!r} is {dtype.simpleString()}; it must be binary or string (valueFormat=string "
            f"writes any scalar as text, valueFormat=json serialises columns)"
        )
    if wopts.value_format == "string" and isinstance(dtype, (T.StructType, T.ArrayType, T.MapType)):
        raise InvalidOptionError(
            f"dataColumn: column {d!r} is {dtype.simpleString()}; valueFormat=string writes scalars as text "
            f"(valueFormat=json serialises structures)"
        )
    return None


def _json_payloads(batch: Any, plan: JsonPlan) -> list[bytes]:
    from ._values import json_encoder

    enc = json_encoder()
    names = batch.schema.names
    if plan.struct:
        values = batch.column(names.index("value")).to_pylist(maps_as_pydicts="strict")
        return [b"" if v is None else enc(v) for v in values]
    import pyarrow as pa

    sub = pa.RecordBatch.from_arrays([batch.column(names.index(c)) for c in plan.columns], names=list(plan.columns))
    return [enc(r) for r in sub.to_pylist(maps_as_pydicts="strict")]


# Rows converted to Python objects at a time: Spark's Arrow batches hold up to
# spark.sql.execution.arrow.maxRecordsPerBatch rows (10,000 by default, 40 MB of 4 KiB rows);
# converting a whole one at once held every row twice (Arrow and bytes) beside the writer's window.
_SLICE_ROWS: Final = 1024


def _slices(batches: Iterator[Any]) -> Iterator[Any]:
    """Each record batch as zero-copy slices of at most ``_SLICE_ROWS`` rows."""
    for batch in batches:
        n = batch.num_rows
        if n <= _SLICE_ROWS:
            yield batch
            continue
        for start in range(0, n, _SLICE_ROWS):
            yield batch.slice(start, _SLICE_ROWS)


def arrow_rows(batches: Iterator[Any], wopts: WriteOptions, plan: JsonPlan | None = None) -> Iterator[Any]:
    """The rows of Arrow record batches (a partition, in order) in shapes the partition writer
    takes: the data column's values alone (bytes or str) when the writer reads no other column,
    else ``(data, subject, headers, msg_id)`` tuples. Columns are converted a slice of a batch
    at a time (``_SLICE_ROWS`` rows), which costs far less than Spark building a ``Row`` per
    row. With ``valueFormat=json`` the payloads are the rows serialised (``plan``); a subject
    column's new values are checked against ``wopts.captures`` before the batch is published."""
    d, s, h, m = wopts.data_column, wopts.subject_column, wopts.headers_column, wopts.msg_id_column
    seen: set[str] = set()
    check = wopts.captures is not None and wopts.subject is None
    for batch in _slices(batches):
        names = batch.schema.names
        if m is not None and m not in names:
            raise InvalidOptionError(f"msgIdColumn: the DataFrame has no column {m!r} (columns: {names})")
        data: list[Any]
        if plan is not None:
            data = _json_payloads(batch, plan)
        else:
            if d not in names:
                raise InvalidOptionError(f"dataColumn: the DataFrame has no column {d!r} (columns: {names})")
            col = batch.column(names.index(d))
            if wopts.value_format == "string" and not _is_text(col.type):
                col = col.cast(_arrow_string())
            data = col.to_pylist()
        subjects = batch.column(names.index(s)).to_pylist() if s in names and wopts.subject is None else None
        if check and subjects is not None:
            from ._writer import check_captured

            check_captured(subjects, wopts, seen)
        headers = batch.column(names.index(h)).to_pylist() if h in names else None
        ids = batch.column(names.index(m)).to_pylist() if m is not None else None
        if subjects is None and headers is None and ids is None:
            if None in data:
                data = [b"" if v is None else v for v in data]
            yield from data
        else:
            n = len(data)
            yield from zip(
                data,
                subjects if subjects is not None else itertools.repeat(None, n),
                headers if headers is not None else itertools.repeat(None, n),
                ids if ids is not None else itertools.repeat(None, n),
            )


def _is_text(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _arrow_string() -> Any:
    import pyarrow as pa

    return pa.string()


class JetStreamBatchWriter(DataSourceArrowWriter):
    """``df.write.format("jetstream")``: every task publishes its rows with msg ids
    ``<write id>/<partition>/<row index>`` (or ``msgIdColumn``); the write id is fixed here, on
    the driver, so retried and speculative task attempts publish the same ids."""

    def __init__(self, config: NatsConfig, wopts: WriteOptions, write_id: str, plan: JsonPlan | None = None) -> None:
        self.config = config
        self.wopts = wopts
        self.write_id = write_id
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """One task: its partition's Arrow record batches, published in order."""
        from ._writer import write_rows

        ctx = _task_context()
        pid = ctx.partitionId() if ctx is not None else 0
        rows = arrow_rows(iterator, self.wopts, getattr(self, "plan", None))
        n = write_rows(rows, self.config, self.wopts, write_id=self.write_id, partition_id=pid)
        return JetStreamCommitMessage(partition_id=pid, count=n, write_id=self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, tasks = _sum_counts(messages)
        _log.info("jetstream write %s committed: %d rows from %d tasks", self.write_id, rows, tasks)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log.warning(
            "jetstream write %s aborted: %s. Re-running the same write (same msgIdColumn values, or a task retry) "
            "publishes the same msg ids, which the stream deduplicates",
            self.write_id,
            _describe_tasks(messages),
        )


def streaming_write_id(base: str, query_id: str | None, batch_id: int | str | None) -> str:
    """The write id of one micro-batch: stable across a restart from the same checkpoint (the
    query id is stored there, the batch id is replayed) so a replayed batch publishes the same
    msg ids."""
    parts = [base]
    if query_id:
        parts.append(query_id.replace("-", "")[:16])
    parts.append(f"b{batch_id if batch_id is not None else 'x'}")
    return "-".join(parts)


class JetStreamStreamWriter(_StreamWriterBase):  # type: ignore[misc]
    """``df.writeStream.format("jetstream")``: like the batch writer, with a write id per
    micro-batch derived from a checkpoint-stable base, the streaming query id and the batch id."""

    def __init__(self, config: NatsConfig, wopts: WriteOptions, base_id: str, plan: JsonPlan | None = None) -> None:
        self.config = config
        self.wopts = wopts
        self.base_id = base_id
        self.plan = plan

    def _write_id(self, ctx: Any) -> str:
        query_id = batch_id = None
        if ctx is not None:
            query_id = ctx.getLocalProperty(_QUERY_ID_PROPERTY)
            batch_id = ctx.getLocalProperty(_BATCH_ID_PROPERTY)
        if batch_id is None:
            raise JetStreamError(
                "jetstream streaming write: Spark did not give the micro-batch id to the task "
                f"(local property {_BATCH_ID_PROPERTY!r}); cannot build exactly-once msg ids"
            )
        return streaming_write_id(self.base_id, query_id, batch_id)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from ._writer import write_rows

        ctx = _task_context()
        pid = ctx.partitionId() if ctx is not None else 0
        write_id = self._write_id(ctx)
        plan = getattr(self, "plan", None)
        if _StreamWriterBase is not DataSourceStreamWriter:
            rows = arrow_rows(iterator, self.wopts, plan)
        else:  # pragma: no cover - PySpark 4.0 hands Rows
            rows = payload_rows(iterator, self.wopts, plan)
        n = write_rows(rows, self.config, self.wopts, write_id=write_id, partition_id=pid)
        return JetStreamCommitMessage(partition_id=pid, count=n, write_id=write_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, tasks = _sum_counts(messages)
        _log.info("jetstream streaming write %s batch %d committed: %d rows from %d tasks", self.base_id, batchId, rows, tasks)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log.warning(
            "jetstream streaming write %s batch %d aborted: %s. Spark runs batch %d again when the query restarts "
            "from its checkpoint, with the same msg ids, so the stream keeps one copy of each row (within its "
            "duplicate window)",
            self.base_id,
            batchId,
            _describe_tasks(messages),
            batchId,
        )


def _stable_base(opts: Mapping[str, str], wopts: WriteOptions, config: NatsConfig) -> str:
    """A write-id base that a restarted query computes again: the ``writeId`` option if given,
    else a digest of the checkpoint location (when passed as an option) and the sink's target."""
    explicit = _opt(opts, "writeId")
    if explicit is not None:
        if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", explicit):
            raise InvalidOptionError(f"writeId: letters, digits, '-' or '_' (at most 64), got {explicit!r}")
        return explicit
    material = json.dumps(
        [
            _opt(opts, "checkpointLocation") or "",
            _opt(opts, "queryName") or "",
            wopts.subject or "",
            wopts.subject_column,
            wopts.stream or "",
            list(config.servers),
        ]
    )
    return "s" + hashlib.sha256(material.encode()).hexdigest()[:16]


# ====================================================================== the data source


def _kv_bucket(opts: Mapping[str, str]) -> str | None:
    """The ``kvBucket`` option: a read of a key-value bucket's current values instead of a
    stream (see :mod:`jssync.spark.kvread`, when present)."""
    return _opt(opts, "kvBucket")


class JetStreamDataSource(DataSource):
    """The ``jetstream`` data source: ``spark.dataSource.register(JetStreamDataSource)``.

    Options (strings, names case-insensitive; an unknown one is an error naming the closest
    known one, see :mod:`jssync.spark._options`): ``servers`` (required), credentials
    (``user``, ``password``, ``token``, ``credsFile``, ``nkeySeedFile``, ``tls``,
    ``tlsCaFile``, ``tlsCertFile``, ``tlsKeyFile``, ``connectTimeout``); reading: ``stream``
    (required), ``subjects``, ``startingOffsets``, ``startingTimestamp``, ``endingOffsets``
    (batch), ``minPartitions``, ``maxRecordsPerPartition``, ``partitionBy`` (batch),
    ``maxRecordsPerTrigger`` (streaming), ``failOnDataLoss``, ``fetchBatchSize``, ``directGet``,
    ``includeHeaders``, ``valueFormat``, ``valueSchema``, ``mode``,
    ``columnNameOfCorruptRecord``, ``kvBucket``; writing: see :class:`WriteOptions`,
    ``writeId``, ``valueFormat`` and ``checkSubjects``. Kafka connector names with the same
    meaning are accepted (``subscribe``, ``subscribePattern``, ``maxOffsetsPerTrigger``,
    ``startingOffsetsByTimestamp``, ``topic``, ``includeHeaders``).
    """

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.options: Any = options

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def _read_options(self, streaming: bool) -> tuple[NatsConfig, ReadOptions]:
        opts = normalize(self.options, "stream_read" if streaming else "read")
        config = NatsConfig.from_options(opts)
        return config, ReadOptions.from_options(opts, streaming=streaming)

    def schema(self) -> StructType | str:
        try:
            opts = option_lookup(self.options)
            if _kv_bucket(opts) is not None:  # a key-value bucket's snapshot (kvread.py)
                from .kvread import KV_SCHEMA

                return KV_SCHEMA
            ropts = ReadOptions.from_options(opts, streaming=False)
        except InvalidOptionError:
            return SCHEMA  # (reader() / streamReader() / writer() report the option error)
        return SCHEMA if ropts.plain else ddl(ropts.columns())

    def reader(self, schema: StructType) -> DataSourceReader:
        from .kvread import KvBucketReader, KvReadOptions, wants_kv_bucket

        if wants_kv_bucket(self.options):  # a key-value bucket's snapshot (kvread.py)
            opts = normalize(self.options, "read")
            return KvBucketReader(NatsConfig.from_options(opts), KvReadOptions.from_options(opts))
        config, ropts = self._read_options(streaming=False)
        check_user_schema(schema, ropts)
        return JetStreamBatchReader(config, ropts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .kvread import KvReadOptions, wants_kv_bucket

        if wants_kv_bucket(self.options):
            KvReadOptions.from_options(self.options, streaming=True)  # (raises: batch reads only)
        config, ropts = self._read_options(streaming=True)
        check_user_schema(schema, ropts)
        return JetStreamStreamReader(config, ropts)

    def _write_options(self, role: Role, overwrite: bool) -> tuple[dict[str, str], NatsConfig, WriteOptions]:
        if overwrite:
            raise InvalidOptionError(
                "mode: JetStream streams are append-only; use mode('append') (overwrite is not supported)"
            )
        opts = normalize(self.options, role)
        return opts, NatsConfig.from_options(opts), WriteOptions.from_options(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ._writer import make_write_id

        _, config, wopts = self._write_options("write", overwrite)
        plan = plan_write_columns(schema, wopts)
        wopts = _check_on_driver(config, wopts, columns=True)
        return JetStreamBatchWriter(config, wopts, make_write_id(), plan)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts, config, wopts = self._write_options("stream_write", overwrite)
        plan = plan_write_columns(schema, wopts)
        base = _stable_base(opts, wopts, config)
        wopts = _check_on_driver(config, wopts, columns=True)
        return JetStreamStreamWriter(config, wopts, base, plan)
