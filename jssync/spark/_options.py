"""The option names of the ``jetstream`` data source: which ones each kind of read and write
takes, the Kafka connector's names accepted for the same meaning, and the errors for the rest.

:func:`normalize` runs on the driver, before anything connects: it lower-cases the names (Spark's
options are case-insensitive, and PySpark hands a data source lower-cased keys), resolves the
Kafka aliases to the jetstream names, and refuses

* a name nobody knows, naming the closest known one (``maxPendng`` -> "did you mean maxPending");
* a name of the other side (a write option on a read, ``subjects`` on a write, ...);
* a Kafka name without an equivalent, and any ``kafka.``-prefixed client setting, pointing at
  the jetstream option that does the job;
* an alias given together with its jetstream name.

Every error is an :class:`~jscore.errors.InvalidOptionError` whose message starts with the name
the user wrote. Nothing here imports pyspark.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final, Literal

from jscore.errors import BadSubjectError, InvalidOptionError
from jscore.jsapi import check_filter_subject

__all__ = [
    "Role",
    "CONNECT_OPTIONS",
    "READ_OPTIONS",
    "WRITE_OPTIONS",
    "KAFKA_ALIASES",
    "normalize",
    "canonical",
]

Role = Literal["read", "stream_read", "write", "stream_write"]

CONNECT_OPTIONS: Final = (
    "servers",
    "url",
    "user",
    "password",
    "token",
    "credsFile",
    "nkeySeedFile",
    "tls",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "connectTimeout",
    "name",
)

READ_OPTIONS: Final = (
    "stream",
    "subjects",
    "startingOffsets",
    "startingTimestamp",
    "endingOffsets",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxRecordsPerTrigger",
    "failOnDataLoss",
    "fetchBatchSize",
    "directGet",
    "partitionBy",
    "includeHeaders",
    "valueFormat",
    "valueSchema",
    "mode",
    "columnNameOfCorruptRecord",
    "kvBucket",
    "kvListPageSize",
)

WRITE_OPTIONS: Final = (
    "stream",
    "subject",
    "subjectColumn",
    "dataColumn",
    "headersColumn",
    "msgIdColumn",
    "dedupeMode",
    "minDuplicateWindow",
    "failOnShortWindow",
    "maxPending",
    "maxPendingBytes",
    "ackTimeout",
    "retries",
    "writeId",
    "valueFormat",
    "checkSubjects",
)

# Options Spark itself may hand to a streaming sink: taken, not ours to check.
_SPARK_OWN: Final = ("checkpointLocation", "queryName")

_BATCH_ONLY: Final = frozenset({"endingoffsets", "partitionby"})
_STREAM_ONLY_READ: Final = frozenset({"maxrecordspertrigger"})
_STREAM_ONLY_WRITE: Final = frozenset({"writeid"})

KAFKA_ALIASES: Final[dict[str, tuple[str, str]]] = {
    # Kafka connector name -> (jetstream name, the side that takes it)
    "subscribe": ("subjects", "read"),
    "subscribePattern": ("subjects", "read"),
    "maxOffsetsPerTrigger": ("maxRecordsPerTrigger", "read"),
    "startingOffsetsByTimestamp": ("startingTimestamp", "read"),
    "topic": ("subject", "write"),
}
"""The Kafka connector's option names taken with the same meaning (see docs/spark.md)."""

_KAFKA_NO_EQUIVALENT: Final = {
    "assign": "a stream has no partitions to assign; read a subset with subjects (filter subjects, wildcards allowed)",
    "minOffsetsPerTrigger": "no jetstream equivalent (each micro-batch reads what is there, up to maxRecordsPerTrigger)",
    "maxTriggerDelay": "no jetstream equivalent (each micro-batch reads what is there, up to maxRecordsPerTrigger)",
    "endingOffsetsByTimestamp": "no jetstream equivalent; end a batch read at a sequence with endingOffsets",
    "endingTimestamp": "no jetstream equivalent; end a batch read at a sequence with endingOffsets",
    "startingOffsetsByTimestampStrategy": (
        "no jetstream equivalent: a timestamp after the last message starts at the end of the stream"
    ),
    "groupIdPrefix": "no consumer group: a read leaves no state on the server (its position lives in Spark's checkpoint)",
    "kafkaConsumer.pollTimeoutMs": "no jetstream equivalent; fetches are no-wait pulls of fetchBatchSize messages",
    "fetchOffset.numRetries": "no jetstream equivalent (offsets are stream sequences read from the stream's info)",
    "fetchOffset.retryIntervalMs": "no jetstream equivalent (offsets are stream sequences read from the stream's info)",
}

_KAFKA_CLIENT: Final = {
    "bootstrap.servers": "use servers (comma-separated nats:// URLs)",
    "security.protocol": "use tls=true, or tlsCaFile / tlsCertFile / tlsKeyFile",
    "ssl.truststore.location": "use tlsCaFile (a PEM file)",
    "ssl.keystore.location": "use tlsCertFile and tlsKeyFile (PEM files)",
    "sasl.mechanism": "use user and password, token, credsFile or nkeySeedFile",
    "sasl.jaas.config": "use user and password, token, credsFile or nkeySeedFile",
    "client.id": "use name (the connection name the server shows)",
    "group.id": "no consumer group: a read leaves no state on the server (its position lives in Spark's checkpoint)",
    "request.timeout.ms": "use ackTimeout (seconds) for writes, connectTimeout for connecting",
    "delivery.timeout.ms": "use ackTimeout and retries (a publish is re-sent for ackTimeout * (retries + 1) seconds)",
    "max.in.flight.requests.per.connection": "use maxPending (publishes in flight per task)",
    "buffer.memory": "use maxPendingBytes (bytes of publishes in flight per task)",
    "enable.idempotence": "always on: every row carries a Nats-Msg-Id the stream deduplicates (see dedupeMode)",
    "acks": "always all: every publish waits for the stream's acknowledgement",
    "max.poll.records": "use fetchBatchSize",
    "retries": "use retries (re-sends of a publish, with the same msg id)",
    "socket.connection.setup.timeout.ms": "use connectTimeout (seconds)",
    "isolation.level": "no transactions: a read sees every stored message",
}

_CANONICAL: Final[dict[str, str]] = {
    n.lower(): n for n in (*CONNECT_OPTIONS, *READ_OPTIONS, *WRITE_OPTIONS, *_SPARK_OWN, *KAFKA_ALIASES)
}
_READ_LOW: Final = frozenset(n.lower() for n in READ_OPTIONS)
_WRITE_LOW: Final = frozenset(n.lower() for n in WRITE_OPTIONS)
_CONNECT_LOW: Final = frozenset(n.lower() for n in CONNECT_OPTIONS)
_SPARK_LOW: Final = frozenset(n.lower() for n in _SPARK_OWN)
_OLD: Final = {"creds": "credsFile", "nkeyseed": "nkeySeedFile"}


def canonical(name: str) -> str:
    """The documented spelling of an option name given in any case (itself if unknown)."""
    return _CANONICAL.get(name.lower(), name)


def _side(role: Role) -> str:
    return "read" if role in ("read", "stream_read") else "write"


def _known(role: Role) -> frozenset[str]:
    side = _READ_LOW if _side(role) == "read" else _WRITE_LOW
    return _CONNECT_LOW | side | _SPARK_LOW


def _suggest(low: str, role: Role) -> str:
    pool = sorted(_known(role) | {a.lower() for a, (_, side) in KAFKA_ALIASES.items() if side == _side(role)})
    close = difflib.get_close_matches(low, pool, n=1, cutoff=0.6)
    if not close:
        # A prefix or a fragment (e.g. "maxrecords") is still a useful hint.
        close = [p for p in pool if low in p or p in low][:1]
    return f" (did you mean {_CANONICAL.get(close[0], close[0])}?)" if close else ""


def normalize(options: Mapping[str, object], role: Role) -> dict[str, str]:
    """The options of one read or write, checked against the names it takes: keys lower-cased,
    Kafka aliases replaced by their jetstream names, values as given (strings). Raises
    :class:`InvalidOptionError` starting with the offending name (see the module doc)."""
    side = _side(role)
    known = _known(role)
    out: dict[str, str] = {}
    via: dict[str, str] = {}  # lower-cased jetstream name -> the alias it came from
    for key, value in options.items():
        if not isinstance(key, str):
            raise InvalidOptionError(f"option names must be strings, got {key!r}")
        low = key.lower()
        if low.startswith("kafka."):
            rest = key[len("kafka.") :]
            hint = _KAFKA_CLIENT.get(rest.lower()) or _KAFKA_CLIENT.get(rest)
            raise InvalidOptionError(
                f"{key}: kafka.-prefixed options configure a Kafka client; "
                + (hint if hint else "the jetstream source takes its own options (see the option table in docs/spark.md)")
            )
        if low in _OLD:
            raise InvalidOptionError(f"{key}: use {_OLD[low]} (the path of a file read on the executor)")
        if low == "path":
            raise InvalidOptionError(
                f"{key}: the jetstream source takes no path; name the stream with option('stream', ...) "
                "(reads) or the subject with option('subject', ...) (writes)"
            )
        alias = next((a for a in KAFKA_ALIASES if a.lower() == low), None)
        if alias is not None:
            target, alias_side = KAFKA_ALIASES[alias]
            if alias_side != side:
                raise InvalidOptionError(f"{alias}: the Kafka connector's {alias_side} option; a {side} does not take it")
            tlow = target.lower()
            if tlow in out or tlow in via:
                raise InvalidOptionError(f"{alias}: give either {alias} or {target}, not both")
            via[tlow] = alias
            out[tlow] = _alias_value(alias, value)
            continue
        kafka = next((k for k in _KAFKA_NO_EQUIVALENT if k.lower() == low), None)
        if kafka is not None:
            raise InvalidOptionError(f"{kafka}: the Kafka connector's option has no jetstream counterpart: {_KAFKA_NO_EQUIVALENT[kafka]}")
        if low not in known:
            name = _CANONICAL.get(low)
            if name is not None:  # an option of the other side
                if side == "read":
                    hint = " (a read filters with subjects)" if low == "subject" else ""
                    raise InvalidOptionError(f"{name}: a write option; a read does not take it{hint}")
                hint = {
                    "subjects": " (a write sends to subject, or to the subject column of each row)",
                    "mode": " (the save mode is .mode('append'); mode is how a read treats malformed payloads)",
                }.get(low, "")
                raise InvalidOptionError(f"{name}: a read option; a write does not take it{hint}")
            raise InvalidOptionError(f"{key}: unknown option of the jetstream source{_suggest(low, role)}")
        if low in via:
            raise InvalidOptionError(f"{via[low]}: give either {via[low]} or {canonical(low)}, not both")
        if role == "stream_read" and low in _BATCH_ONLY:
            raise InvalidOptionError(f"{canonical(low)}: only valid for a batch read, not a streaming one")
        if role == "write" and low in _STREAM_ONLY_WRITE:
            raise InvalidOptionError(f"{canonical(low)}: only valid for a streaming write (a batch write picks a new write id)")
        out[low] = value if isinstance(value, str) else str(value)
    return out


def _alias_value(alias: str, value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    if alias == "subscribePattern":
        # NATS matches subjects with wildcards ('*' one token, '>' the rest), not regular expressions.
        bad = any(c in text for c in "\\[](){}|^$+?")
        if not bad:
            try:
                check_filter_subject(text.strip(), "subscribePattern")
            except BadSubjectError:
                bad = True
        if bad:
            raise InvalidOptionError(
                f"subscribePattern: NATS matches subjects with wildcards ('*' one token, '>' the rest), not "
                f"regular expressions: got {text!r} (e.g. orders.> or orders.*.eu)"
            )
    if alias == "startingOffsetsByTimestamp":
        return _one_timestamp(text)
    return text


def _one_timestamp(text: str) -> str:
    """Kafka's ``{"topic": {"0": ms, "1": ms}}`` (or a plain timestamp) -> one timestamp: a
    stream has one sequence, so every partition must name the same time."""
    import json

    stripped = text.strip()
    if not stripped.startswith("{"):
        return stripped
    try:
        value = json.loads(stripped)
    except ValueError:
        value = None
    stamps: set[object] = set()
    if isinstance(value, dict) and value:
        for per_topic in value.values():
            if isinstance(per_topic, dict) and per_topic:
                stamps.update(per_topic.values())
            else:
                stamps.add(None)
    if len(stamps) != 1 or not isinstance(next(iter(stamps)), int) or isinstance(next(iter(stamps)), bool):
        raise InvalidOptionError(
            "startingOffsetsByTimestamp: a stream has one sequence, not partitions: give one timestamp (epoch "
            f'milliseconds or ISO 8601), or Kafka\'s {{"topic": {{"0": ms}}}} with the same ms everywhere; got {text!r}'
        )
    return str(next(iter(stamps)))
