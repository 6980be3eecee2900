"""PySpark integration: exactly-once writers and the ``jetstream`` data source.

Needs the ``spark`` extra (``pip install -e '.[spark]'`` in the jssync checkout: pyspark >= 4.0, pyarrow and
pandas, which PySpark asks for in ``mapInArrow``). The
package itself imports without them, so configs can be built and checked anywhere; every Spark
entry point raises an :class:`ImportError` saying what to install when they are missing.

```python
from jssync.spark import JetStreamDataSource, JetStreamForeachWriter, publish_partition, write_batch

run = make_write_id()                                         # on the driver, once per job
df.foreachPartition(lambda rows: publish_partition(rows, servers=url, subject="orders.new", run_id=run))
df.writeStream.foreach(JetStreamForeachWriter(servers=url, subject="orders.new")).start()
df.writeStream.foreachBatch(lambda bdf, bid: write_batch(bdf, bid, servers=url, subject="orders.new")).start()
```

Every writer publishes through the async-publish window of a connection cached per Python
worker process (:mod:`jssync.spark._cache`), checks every ack, re-sends transient and ambiguous
failures with the same msg id, and returns only once every ack is in. Msg ids are built from a
write id fixed on the driver plus the partition id and the row index (the same on every attempt
of a task), or taken from a column (``msg_id_column``). See docs/spark.md.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from jscore.errors import InvalidOptionError

from . import _cache
from ._cache import discard_client, get_client
from ._config import NatsConfig, WriteOptions
from ._values import JsonPlan, RowPayloads, payload_rows
from ._writer import (
    DuplicateWindowWarning,
    PartitionWriter,
    ShortDuplicateWindowError,
    WriteResult,
    check_duplicate_window,
    check_targets,
    check_write_id,
    ensure_checked,
    make_write_id,
    msg_id,
    write_partition,
    write_rows,
)

if TYPE_CHECKING:
    from jssync.client import Client

__all__ = [
    "JetStreamDataSource",
    "JetStreamForeachWriter",
    "publish_partition",
    "write_batch",
    "NatsConfig",
    "WriteOptions",
    "WriteResult",
    "DuplicateWindowWarning",
    "ShortDuplicateWindowError",
    "make_write_id",
    "msg_id",
    "write_rows",
    "write_partition",
    "check_duplicate_window",
    "check_targets",
    "get_client",
    "discard_client",
    "require_spark",
    "INSTALL_HINT",
]

INSTALL_HINT = "pip install -e '.[spark]' (in the jssync checkout)"

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The Spark local property holding a streaming query's id (stable across restarts from the
same checkpoint): the default write id of the streaming writers."""

_spark_checked = False


def require_spark() -> None:
    """Raise an :class:`ImportError` naming the missing package and the install command when
    pyspark (>= 4.0) or pyarrow is not importable."""
    global _spark_checked
    if _spark_checked:
        return
    for module, what in (("pyspark", "pyspark>=4.0"), ("pyarrow", "pyarrow>=15")):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ImportError(
                f"jssync.spark needs {what} ({module} is not installed): {INSTALL_HINT}",
                name=module,
            )
    import pyspark

    major = int(pyspark.__version__.split(".")[0])
    if major < 4:
        raise ImportError(f"jssync.spark needs pyspark>=4.0 (found {pyspark.__version__}): {INSTALL_HINT}", name="pyspark")
    _spark_checked = True


def __getattr__(name: str) -> Any:
    # The data source lives in its own module (it subclasses pyspark's DataSource, so importing
    # it imports pyspark): loaded on first access only.
    if name == "JetStreamDataSource":
        require_spark()
        from .datasource import JetStreamDataSource

        globals()[name] = JetStreamDataSource
        return JetStreamDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- options

_CONNECT_KEYS = frozenset(
    {
        "user",
        "password",
        "token",
        "creds_file",
        "nkey_seed_file",
        "tls",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "connect_timeout",
        "name",
    }
)
_WRITE_KEYS = frozenset(
    {
        "subject_column",
        "data_column",
        "headers_column",
        "msg_id_column",
        "dedupe_mode",
        "stream",
        "min_duplicate_window",
        "fail_on_short_window",
        "max_pending",
        "max_pending_bytes",
        "ack_timeout",
        "retries",
        "check_subjects",
        "value_format",
    }
)


def make_configs(
    servers: str | Sequence[str] | NatsConfig,
    subject: str | None,
    options: dict[str, Any],
) -> tuple[NatsConfig, WriteOptions]:
    """Build the (NatsConfig, WriteOptions) pair from the writers' keyword arguments.

    ``servers`` is a URL, comma-separated URLs, a list of URLs or a ready :class:`NatsConfig`
    (then the connection keywords are not allowed); ``write_options=WriteOptions(...)`` may be
    given instead of the write keywords. Unknown keywords raise :class:`TypeError`."""
    opts = dict(options)
    write_options = opts.pop("write_options", None)
    unknown = set(opts) - _CONNECT_KEYS - _WRITE_KEYS
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {sorted(unknown)}; connection: {sorted(_CONNECT_KEYS)}, "
            f"writing: {sorted(_WRITE_KEYS)}"
        )
    connect_kw = {k: v for k, v in opts.items() if k in _CONNECT_KEYS}
    write_kw = {k: v for k, v in opts.items() if k in _WRITE_KEYS}
    if isinstance(servers, NatsConfig):
        if connect_kw:
            raise TypeError(f"servers is a NatsConfig: give {sorted(connect_kw)} in it, not as keywords")
        config = servers
    else:
        if isinstance(servers, str):
            servers_t = tuple(s.strip() for s in servers.split(",") if s.strip())
        elif isinstance(servers, Sequence):
            servers_t = tuple(servers)
        else:
            raise InvalidOptionError(f"servers: expected a URL, a list of URLs or a NatsConfig, got {type(servers).__name__}")
        config = NatsConfig(servers=servers_t, **connect_kw)
    if write_options is not None:
        if not isinstance(write_options, WriteOptions):
            raise TypeError(f"write_options must be a WriteOptions, got {type(write_options).__name__}")
        if write_kw:
            raise TypeError(f"write_options given: put {sorted(write_kw)} in it, not as keywords")
        wo = write_options
        if subject is not None:
            wo = WriteOptions(**{**_fields(wo), "subject": subject})
    else:
        wo = WriteOptions(subject=subject, **write_kw)
    return config, wo


def _fields(wo: WriteOptions) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(wo, f.name) for f in fields(wo)}


def _task_context() -> Any:
    from pyspark import TaskContext

    return TaskContext.get()


# --------------------------------------------------------------------------- foreachPartition


def publish_partition(
    rows: Iterable[Any],
    *,
    servers: str | Sequence[str] | NatsConfig,
    subject: str | None = None,
    run_id: str | None = None,
    partition_id: int | None = None,
    **options: Any,
) -> int:
    """Publish one partition's rows, for ``df.foreachPartition`` (or ``rdd.mapPartitions``);
    returns the number of rows written (rows the stream already had count as written).

    ``run_id`` is the write id, fixed on the driver before the job (:func:`make_write_id`) and
    captured by the lambda, so every attempt of a task publishes the same msg ids
    ``<run_id>-<partition>-<row index>``; without it, ``msg_id_column`` must name a column of
    unique ids. The partition id comes from ``TaskContext`` (``partition_id`` overrides it,
    e.g. outside Spark).

    Rows are ``Row``\\ s or dicts with the ``data`` column (binary or string; ``data_column``),
    optional ``subject`` (``subject_column``; the ``subject`` argument overrides it) and
    ``headers`` (a map; ``headers_column``) columns, or tuples ``(data, subject, headers,
    msg_id)``. Other keywords: the connection's (``user``, ``password``, ``token``,
    ``creds_file``, ``nkey_seed_file``, ``tls``, ``tls_ca_file``, ``tls_cert_file``,
    ``tls_key_file``, ``connect_timeout``, ``name``: see :class:`NatsConfig`) and the writer's (``msg_id_column``,
    ``dedupe_mode``, ``stream``, ``min_duplicate_window``, ``fail_on_short_window``,
    ``max_pending``, ``max_pending_bytes``, ``ack_timeout``, ``retries``): see :class:`WriteOptions`.

    ``value_format="json"`` serialises each row instead of taking a data column: its ``value``
    field when that is a struct, else every field but the subject and headers ones (as the data
    source's ``valueFormat=json``); ``value_format="string"`` writes the data column as text.

    ``rows`` may also be Arrow record batches (or tables), as ``df.mapInArrow`` hands them over:
    they are converted a column at a time, as the ``jetstream`` data source's sink converts
    them, instead of Spark building a ``Row`` per row (the fast way: see docs/spark.md). The
    columns the writer reads are checked on the first batch as the sink checks the DataFrame's,
    before anything is published; every later batch must bring the same ones.
    """
    require_spark()
    config, wo = make_configs(servers, subject, options)
    if run_id is None:
        if wo.msg_id_column is None:
            raise InvalidOptionError(
                "run_id: publish_partition needs run_id (a write id fixed on the driver: "
                "run_id = jssync.spark.make_write_id() before df.foreachPartition) or msg_id_column"
            )
    else:
        check_write_id(run_id, "run_id")
    if partition_id is None:
        ctx = _task_context()
        if ctx is None:
            raise InvalidOptionError("partition_id: not running in a Spark task (no TaskContext); pass partition_id")
        partition_id = int(ctx.partitionId())
    items = iter(rows)
    first = next(items, _NO_ROW)
    if first is _NO_ROW:
        return write_rows((), config, wo, write_id=run_id, partition_id=partition_id)
    if _is_arrow(first):
        todo = _arrow_partition(first, items, wo)
    elif _is_pandas_frame(first):
        raise InvalidOptionError(
            "rows: a pandas DataFrame (mapInPandas?): hand a partition over as Arrow record batches "
            "(df.mapInArrow) or as rows (df.foreachPartition)"
        )
    else:
        todo = payload_rows(itertools.chain((first,), items), wo)
    return write_rows(todo, config, wo, write_id=run_id, partition_id=partition_id)


_NO_ROW = object()


def _is_arrow(value: object) -> bool:
    """Whether ``value`` is a ``pyarrow.RecordBatch`` or ``Table`` (never imports pyarrow: one
    implies it is loaded)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(value, (pa.RecordBatch, pa.Table))


def _is_pandas_frame(value: object) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(value, pd.DataFrame)


def _arrow_partition(first: Any, rest: Iterator[Any], wo: WriteOptions) -> Iterator[Any]:
    """The rows of a partition handed over as Arrow record batches (``mapInArrow``; tables are
    read as their batches), in the shapes the partition writer takes: the first one's columns
    are checked as the data source checks a DataFrame's (the JSON plan made from them), a later
    one's must be the same, and every batch is converted a column at a time
    (:func:`jssync.spark.datasource.arrow_rows`)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql.pandas.types import from_arrow_schema

    from .datasource import arrow_rows, plan_write_columns

    read: set[str] | None = None  # (None: every column, serialised by valueFormat=json)
    if wo.value_format != "json":  # (only the columns the writer reads: any others may be of any type)
        read = {wo.data_column, wo.headers_column}
        read.update(c for c in (wo.msg_id_column, wo.subject_column if wo.subject is None else None) if c)

    def columns(schema: Any) -> Any:
        return schema if read is None else pa.schema([f for f in schema if f.name in read])

    first_columns = columns(first.schema)
    try:
        struct = from_arrow_schema(first_columns)
    except Exception as exc:  # noqa: BLE001 - pyspark's own type error: a column Spark has no type for
        raise InvalidOptionError(f"rows: the record batches have a column Spark cannot take: {exc}") from exc
    plan = plan_write_columns(struct, wo)

    def batches() -> Iterator[Any]:
        seen = first.schema
        for i, item in enumerate(itertools.chain((first,), rest)):
            if item.__class__ is not pa.RecordBatch and not isinstance(item, pa.Table):
                raise InvalidOptionError(
                    f"rows: item {i} of the partition is a {type(item).__name__}, after Arrow record batches: "
                    "hand over a partition either as record batches (mapInArrow) or as rows"
                )
            if not item.schema.equals(seen):  # (mapInArrow's batches never differ: checked once)
                if not columns(item.schema).equals(first_columns):
                    raise InvalidOptionError(
                        f"rows: item {i} of the partition has other columns than the first ({columns(item.schema)}, "
                        f"after {first_columns}): the columns written must be the same in every batch"
                    )
                seen = item.schema
            yield from item.to_batches() if isinstance(item, pa.Table) else (item,)

    return arrow_rows(batches(), wo, plan)


# --------------------------------------------------------------------------- writeStream.foreach


class JetStreamForeachWriter:
    """A ``writeStream.foreach`` writer: ``df.writeStream.foreach(JetStreamForeachWriter(
    servers=url, subject="orders.new")).start()``.

    The constructor runs on the driver: it checks the target there (:func:`check_targets`: a
    stream captures the subject, the subject-mode stream settings, the duplicate window, whose
    :class:`DuplicateWindowWarning` is given here and not again by the executors) on a short-lived
    cached connection, unless ``driver_check=False`` (then each executor process checks once).
    Only the settings are pickled to the executors: ``open(partition_id, epoch_id)`` takes the
    process's cached connection,
    ``process(row)`` publishes asynchronously, ``close(error)`` waits for every ack (re-sending
    transient failures) and raises if one failed, so the epoch's task fails and Spark retries it.
    A failed ``process`` or ``close`` closes and drops the cached client.

    Msg ids are ``<write id>-<epoch>-<partition>-<row index>``: the write id is ``run_id`` when
    given, else the streaming query's id (the same after a restart from the checkpoint), so a
    re-run epoch publishes the same ids. Give ``msg_id_column`` when the source does not replay an
    epoch's rows in the same partitions and order. ``value_format`` as for
    :func:`publish_partition`.
    """

    def __init__(
        self,
        servers: str | Sequence[str] | NatsConfig,
        subject: str | None = None,
        *,
        run_id: str | None = None,
        driver_check: bool = True,
        **options: Any,
    ) -> None:
        require_spark()
        self.config, self.options = make_configs(servers, subject, options)
        if run_id is not None:
            check_write_id(run_id, "run_id")
        if driver_check:
            with _cache.lease(self.config) as client:
                self.options = check_targets(client, self.options, stacklevel=3)
        self.run_id = run_id
        self._writer: PartitionWriter | None = None
        self._client: Client | None = None
        self._payloads: RowPayloads | None = None
        self.last_result: WriteResult | None = None

    def __repr__(self) -> str:
        return f"JetStreamForeachWriter({self.config!r}, {self.options!r}, run_id={self.run_id!r})"

    _RUNTIME = ("_writer", "_client", "last_result", "_payloads")

    def __getstate__(self) -> dict[str, Any]:
        # Only the settings travel (subclasses' attributes too): never a connection or a
        # half-done writer.
        return {k: v for k, v in self.__dict__.items() if k not in self._RUNTIME}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._writer = None
        self._client = None
        self._payloads = None
        self.last_result = None

    def _write_id(self) -> str | None:
        if self.run_id is not None:
            return self.run_id
        if self.options.msg_id_column is not None:
            return None
        ctx = _task_context()
        qid = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        if not qid:
            raise InvalidOptionError(
                "run_id: no streaming query id in the task's properties; pass run_id (stable across "
                "restarts of the query) or msg_id_column"
            )
        return check_write_id(str(qid), "query id")

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._release()
        wid = self._write_id()
        config = self.config
        client = _cache.acquire(config)
        self._client = client
        try:
            ensure_checked(config, client, self.options)
            prefix = None if wid is None else f"{wid}-{int(epoch_id)}-{int(partition_id)}-"
            self._writer = PartitionWriter(client, self.options, write_id=wid, partition_id=int(partition_id), id_prefix=prefix)
            self._payloads = None if self.options.value_format == "binary" else RowPayloads(self.options)
        except BaseException:
            self._fail()
            raise
        return True

    def process(self, row: Any) -> None:
        writer = self._writer
        if writer is None:
            raise RuntimeError("JetStreamForeachWriter.process called before open")
        try:
            payloads = self._payloads
            writer.add(row if payloads is None else payloads(row))
        except BaseException:
            self._fail()
            raise

    def close(self, error: BaseException | None) -> None:
        writer = self._writer
        self._writer = None
        if writer is None:
            self._release()
            return
        if error is not None:
            writer.close()
            self._fail()
            return
        try:
            self.last_result = writer.finish()
        except BaseException:
            self._fail()
            raise
        self._release()

    def _release(self) -> None:
        client = self._client
        self._client = None
        if client is not None:
            _cache.release(self.config, client)

    def _fail(self) -> None:
        writer = self._writer
        self._writer = None
        if writer is not None:
            writer.close()
        client = self._client
        self._client = None
        if client is not None:
            _cache.release(self.config, client)
            discard_client(self.config, client)


# --------------------------------------------------------------------------- foreachBatch


def write_batch(
    batch_df: Any,
    batch_id: int,
    *,
    servers: str | Sequence[str] | NatsConfig,
    subject: str | None = None,
    query_id: str | None = None,
    **options: Any,
) -> int:
    """Write one micro-batch, for ``writeStream.foreachBatch``; returns the rows written.

    ``df.writeStream.foreachBatch(lambda bdf, bid: write_batch(bdf, bid, servers=url,
    subject="orders.new")).option("checkpointLocation", ...).start()``

    The write id is ``<query id>-<batch id>``: the streaming query's id (the same after a
    restart from the checkpoint; ``query_id`` overrides it, and is required outside a streaming
    query), so a batch re-run after a failure or a restart publishes the same msg ids and the
    stream keeps one copy. Runs on the driver: checks the stream's duplicate window (a
    :class:`DuplicateWindowWarning` here, on the driver) and that a stream captures the subject,
    then publishes the partitions in
    parallel on the executors (``batch_df.rdd.mapPartitions``) and sums their counts.
    ``value_format`` as for :func:`publish_partition` (the columns to serialise are fixed here,
    from the DataFrame's schema, as the data source fixes them).
    """
    require_spark()
    config, wo = make_configs(servers, subject, options)
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise InvalidOptionError(f"batch_id: expected an integer >= 0, got {batch_id!r}")
    if query_id is None:
        try:
            query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
            query_id = None
    write_id: str | None = None
    if query_id:
        write_id = check_write_id(f"{query_id}-{batch_id}", "query_id")
    elif wo.msg_id_column is None:
        raise InvalidOptionError(
            "query_id: write_batch is not running inside a streaming query (no query id); pass "
            "query_id (stable across re-runs of the batch) or msg_id_column"
        )
    selected, plan = _select_columns(batch_df, wo)
    # The checks on the driver, where a warning is seen (the executors skip them: checked=True).
    with _cache.lease(config) as client:
        wo_exec = check_targets(client, wo, stacklevel=3)
    counts = selected.rdd.mapPartitions(_partition_writer(config, wo_exec, write_id, plan)).collect()
    total = 0
    for written, _duplicates, _resent in counts:
        total += int(written)
    return total


def _select_columns(df: Any, wo: WriteOptions) -> tuple[Any, JsonPlan | None]:
    """Only the columns the writer reads (less to convert), checked on the driver as the data
    source checks them; with ``value_format="json"`` also what each payload serialises."""
    from .datasource import plan_write_columns

    plan = plan_write_columns(df.schema, wo)
    names = set(df.schema.fieldNames())
    cols = list(plan.columns) if plan is not None else [wo.data_column]
    if wo.subject is None:
        cols.append(wo.subject_column)
    if wo.headers_column in names:
        cols.append(wo.headers_column)
    if wo.msg_id_column is not None:
        cols.append(wo.msg_id_column)
    seen: list[str] = []
    for c in cols:
        if c not in seen:
            seen.append(c)
    return df.select(*seen), plan


def _partition_writer(config: NatsConfig, wo: WriteOptions, write_id: str | None, plan: JsonPlan | None = None) -> Any:
    def run(rows: Iterable[Any]) -> Iterable[tuple[int, int, int]]:
        ctx = _task_context()
        partition_id = int(ctx.partitionId()) if ctx is not None else 0
        result = write_partition(payload_rows(rows, wo, plan), config, wo, write_id=write_id, partition_id=partition_id)
        yield (result.written, result.duplicates, result.resent)

    return run
