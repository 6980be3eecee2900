"""jscore.models: golden request bytes, response decoding, durations, enums, timestamps.

The golden tests assert on the exact encoded bytes: field order follows the server's structs,
unset fields are not sent, durations are integer nanoseconds.
"""

from __future__ import annotations

import math
import pickle
from datetime import datetime, timedelta, timezone

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jscore import errors, jsapi, models
from jscore.jsapi import parse_nats_time as jsapi_parse
from jscore.times import NatsTime
from jscore.models import (
    AccountInfo,
    AckPolicy,
    Compression,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    ExternalStream,
    PersistMode,
    Placement,
    PriorityPolicy,
    RePublish,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamConsumerLimits,
    StreamInfo,
    StreamListResponse,
    StreamNamesResponse,
    StreamSource,
    SubjectTransform,
    decode,
    decode_response,
    encode,
)

# Replies captured from nats-server 2.15.1.
STREAM_CREATE_REPLY = (
    b'{"type":"io.nats.jetstream.api.v1.stream_create_response","config":{"name":"S","subjects":["a.\\u003e"],'
    b'"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,'
    b'"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,'
    b'"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":false,"deny_delete":false,'
    b'"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,'
    b'"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}},'
    b'"created":"2026-11-22T01:44:53.251628563Z","state":{"messages":0,"bytes":0,"first_seq":0,'
    b'"first_ts":"0001-01-01T00:00:00Z","last_seq":0,"last_ts":"0001-01-01T00:00:00Z","consumer_count":0},'
    b'"ts":"2026-11-22T01:44:53.253148797Z","did_create":true}'
)
CONSUMER_CREATE_REPLY = (
    b'{"type":"io.nats.jetstream.api.v1.consumer_create_response","stream_name":"S","name":"E",'
    b'"created":"2026-11-22T01:44:53.257324647Z","config":{"name":"E","deliver_policy":"all",'
    b'"ack_policy":"explicit","ack_wait":30000000000,"max_deliver":-1,"replay_policy":"instant",'
    b'"max_waiting":512,"max_ack_pending":1000,"inactive_threshold":5000000000,"num_replicas":0,'
    b'"metadata":{"_nats.level":"5","_nats.req.level":"1","_nats.ver":"2.15.1"},"priority_groups":["g"],'
    b'"priority_policy":"pinned_client","priority_timeout":1000000000},"delivered":{"consumer_seq":0,'
    b'"stream_seq":0},"ack_floor":{"consumer_seq":0,"stream_seq":0},"num_ack_pending":0,"num_redelivered":0,'
    b'"num_waiting":0,"num_pending":0,"ts":"2026-11-22T01:44:53.258040625Z",'
    b'"priority_groups":[{"group":"g","pinned_ts":"0001-01-01T00:00:00Z"}]}'
)
ACCOUNT_INFO_REPLY = (
    b'{"type":"io.nats.jetstream.api.v1.account_info_response","memory":0,"storage":35,"reserved_memory":0,'
    b'"reserved_storage":0,"streams":1,"consumers":2,"limits":{"max_memory":-1,"max_storage":-1,'
    b'"max_streams":-1,"max_consumers":-1,"max_ack_pending":-1,"memory_max_stream_bytes":-1,'
    b'"storage_max_stream_bytes":-1,"max_bytes_required":false},"api":{"level":5,"total":4,"errors":1}}'
)

UTC = timezone.utc


# =========================================================================== golden bytes


def test_golden_minimal_stream_config() -> None:
    assert encode(StreamConfig(name="S", subjects=["a.>"])) == b'{"name":"S","subjects":["a.>"]}'


def test_golden_name_only_stream_config() -> None:
    assert encode(StreamConfig(name="S")) == b'{"name":"S"}'


def test_golden_infinite_dedup_stream_config() -> None:
    """The blog's stream: subjects foo.*, discard new, one message per subject, and the
    per-subject discard policy that makes a second publish to a subject fail."""
    cfg = StreamConfig(
        name="dedup",
        subjects=["foo.*"],
        discard=DiscardPolicy.NEW,
        max_msgs_per_subject=1,
        discard_new_per_subject=True,
    )
    expected = (
        b'{"name":"dedup","subjects":["foo.*"],"max_msgs_per_subject":1,"discard":"new",'
        b'"discard_new_per_subject":true}'
    )
    assert encode(cfg) == expected
    assert jsapi.stream_config_request(cfg) == expected


def test_golden_duplicate_window_is_nanoseconds() -> None:
    cfg = StreamConfig(name="S", duplicate_window=120.0)
    assert encode(cfg) == b'{"name":"S","duplicate_window":120000000000}'
    back = decode(encode(cfg), StreamConfig)
    assert back.duplicate_window == 120.0
    assert isinstance(back.duplicate_window, float)


@pytest.mark.parametrize(
    ("seconds", "ns"),
    [(0, 0), (0.0, 0), (1e-9, 1), (0.1, 100_000_000), (0.5, 500_000_000), (1, 1_000_000_000), (30, 30_000_000_000),
     (86400.25, 86_400_250_000_000), (-1e-9, -1)],
)
def test_duration_conversion(seconds: float, ns: int) -> None:
    assert encode(StreamConfig(name="S", max_age=seconds)) == b'{"name":"S","max_age":%d}' % ns
    assert decode(b'{"name":"S","max_age":%d}' % ns, StreamConfig).max_age == pytest.approx(seconds, abs=1e-12)


def test_duration_assigned_after_construction_is_converted_on_encode() -> None:
    cfg = StreamConfig(name="S")
    cfg.max_age = 1.5  # a plain float, set after __post_init__
    cfg.duplicate_window = 2  # an int
    assert encode(cfg) == b'{"name":"S","max_age":1500000000,"duplicate_window":2000000000}'


def test_nested_durations_converted_on_encode() -> None:
    cfg = StreamConfig(name="S", consumer_limits=StreamConsumerLimits(max_ack_pending=5))
    assert cfg.consumer_limits is not None
    cfg.consumer_limits.inactive_threshold = 60  # mutated nested model
    assert encode(cfg) == b'{"name":"S","consumer_limits":{"inactive_threshold":60000000000,"max_ack_pending":5}}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, "10s", True, timedelta(seconds=1), [1]])
def test_invalid_durations_rejected(bad: object) -> None:
    with pytest.raises(errors.InvalidOptionError):
        StreamConfig(name="S", max_age=bad)  # type: ignore[arg-type]


def test_golden_full_stream_config_field_order() -> None:
    cfg = StreamConfig(
        name="ORDERS",
        description="orders",
        subjects=["orders.>"],
        retention=RetentionPolicy.WORKQUEUE,
        max_consumers=10,
        max_msgs=1000,
        max_bytes=1 << 20,
        max_age=3600,
        max_msgs_per_subject=5,
        max_msg_size=1024,
        discard=DiscardPolicy.NEW,
        storage=StorageType.MEMORY,
        num_replicas=3,
        no_ack=False,
        duplicate_window=60,
        placement=Placement(cluster="c1", tags=["ssd"]),
        sources=[
            StreamSource(
                name="UP",
                opt_start_seq=5,
                subject_transforms=[SubjectTransform(src="up.>", dest="orders.up.>")],
                external=ExternalStream(api="$JS.hub.API", deliver="deliver.hub"),
            )
        ],
        compression=Compression.S2,
        first_seq=10,
        subject_transform=SubjectTransform(src="in.>", dest="orders.>"),
        republish=RePublish(src="orders.>", dest="re.orders.>", headers_only=True),
        allow_direct=True,
        mirror_direct=False,
        discard_new_per_subject=True,
        sealed=False,
        deny_delete=True,
        deny_purge=False,
        allow_rollup_hdrs=True,
        consumer_limits=StreamConsumerLimits(inactive_threshold=30, max_ack_pending=100),
        allow_msg_ttl=True,
        subject_delete_marker_ttl=1.5,
        allow_msg_counter=False,
        allow_atomic=True,
        allow_msg_schedules=True,
        persist_mode=PersistMode.ASYNC,
        allow_batched=True,
        metadata={"owner": "team"},
    )
    expected = (
        b'{"name":"ORDERS","description":"orders","subjects":["orders.>"],"retention":"workqueue",'
        b'"max_consumers":10,"max_msgs":1000,"max_bytes":1048576,"max_age":3600000000000,'
        b'"max_msgs_per_subject":5,"max_msg_size":1024,"discard":"new","storage":"memory","num_replicas":3,'
        b'"no_ack":false,"duplicate_window":60000000000,"placement":{"cluster":"c1","tags":["ssd"]},'
        b'"sources":[{"name":"UP","opt_start_seq":5,"subject_transforms":[{"src":"up.>","dest":"orders.up.>"}],'
        b'"external":{"api":"$JS.hub.API","deliver":"deliver.hub"}}],"compression":"s2","first_seq":10,'
        b'"subject_transform":{"src":"in.>","dest":"orders.>"},'
        b'"republish":{"src":"orders.>","dest":"re.orders.>","headers_only":true},"allow_direct":true,'
        b'"mirror_direct":false,"discard_new_per_subject":true,"sealed":false,"deny_delete":true,'
        b'"deny_purge":false,"allow_rollup_hdrs":true,'
        b'"consumer_limits":{"inactive_threshold":30000000000,"max_ack_pending":100},"allow_msg_ttl":true,'
        b'"subject_delete_marker_ttl":1500000000,"allow_msg_counter":false,"allow_atomic":true,'
        b'"allow_msg_schedules":true,"persist_mode":"async","allow_batched":true,"metadata":{"owner":"team"}}'
    )
    assert encode(cfg) == expected
    assert decode(expected, StreamConfig) == cfg


def test_golden_consumer_create_request() -> None:
    subjects = jsapi.ApiSubjects()
    subject, body, name = jsapi.consumer_create_request(
        subjects, "S", ConsumerConfig(durable_name="C"), jsapi.ACTION_CREATE
    )
    assert subject == "$JS.API.CONSUMER.CREATE.S.C"
    assert name == "C"
    assert body == b'{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"},"action":"create"}'


def test_golden_consumer_create_request_with_filter_and_options() -> None:
    cfg = ConsumerConfig(
        name="C",
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=42,
        ack_policy=AckPolicy.ALL,
        ack_wait=10,
        max_deliver=5,
        backoff=[1, 2, 4.5],
        filter_subject="orders.new",
        replay_policy=ReplayPolicy.INSTANT,
        max_ack_pending=100,
        max_batch=10,
        max_expires=30,
        inactive_threshold=300,
        metadata={"k": "v"},
        pause_until=datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        priority_groups=["jobs"],
        priority_policy=PriorityPolicy.PINNED_CLIENT,
        priority_timeout=120,
    )
    subject, body, _ = jsapi.consumer_create_request(jsapi.ApiSubjects(), "S", cfg, jsapi.ACTION_CREATE_OR_UPDATE)
    assert subject == "$JS.API.CONSUMER.CREATE.S.C.orders.new"
    assert body == (
        b'{"stream_name":"S","config":{"name":"C","deliver_policy":"by_start_sequence","opt_start_seq":42,'
        b'"ack_policy":"all","ack_wait":10000000000,"max_deliver":5,'
        b'"backoff":[1000000000,2000000000,4500000000],"filter_subject":"orders.new","replay_policy":"instant",'
        b'"max_ack_pending":100,"max_batch":10,"max_expires":30000000000,"inactive_threshold":300000000000,'
        b'"metadata":{"k":"v"},"pause_until":"2030-01-02T03:04:05.123456Z","priority_groups":["jobs"],'
        b'"priority_policy":"pinned_client","priority_timeout":120000000000},"action":""}'
    )


def test_consumer_create_request_does_not_mutate_the_config() -> None:
    cfg = ConsumerConfig()
    _, body, name = jsapi.consumer_create_request(
        jsapi.ApiSubjects(), "S", cfg, jsapi.ACTION_CREATE, ephemeral_name="eph1"
    )
    assert name == "eph1"
    assert body == b'{"stream_name":"S","config":{"name":"eph1","ack_policy":"explicit"},"action":"create"}'
    assert cfg.name is None and cfg.ack_policy is None


def test_aware_datetimes_encode_rfc3339_naive_rejected() -> None:
    cfg = ConsumerConfig(name="C", opt_start_time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))))
    assert b'"opt_start_time":"2026-01-02T03:04:05+02:00"' in encode(cfg)
    with pytest.raises(errors.InvalidOptionError, match="timezone-aware"):
        ConsumerConfig(name="C", opt_start_time=datetime(2026, 1, 2))
    cfg = ConsumerConfig(name="C")
    cfg.pause_until = datetime(2026, 1, 2)  # assigned later: refused at encode time
    with pytest.raises(errors.InvalidOptionError):
        encode(cfg)


def test_enums_hold_wire_strings() -> None:
    assert [e.value for e in RetentionPolicy] == ["limits", "interest", "workqueue"]
    assert [e.value for e in DiscardPolicy] == ["old", "new"]
    assert [e.value for e in StorageType] == ["file", "memory"]
    assert {e.value for e in AckPolicy} >= {"explicit", "all", "none"}
    assert [e.value for e in DeliverPolicy] == [
        "all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"
    ]
    assert [e.value for e in ReplayPolicy] == ["instant", "original"]
    assert [e.value for e in PriorityPolicy] == ["none", "overflow", "pinned_client", "prioritized"]
    assert [e.value for e in Compression] == ["none", "s2"]
    assert str(RetentionPolicy.WORKQUEUE) == "workqueue"


def test_plain_strings_accepted_for_enum_fields() -> None:
    cfg = StreamConfig(name="S", retention="interest", storage="memory")  # type: ignore[arg-type]
    assert cfg.retention is RetentionPolicy.INTEREST
    assert cfg.storage is StorageType.MEMORY
    assert encode(cfg) == b'{"name":"S","retention":"interest","storage":"memory"}'


def test_explicit_false_and_zero_are_sent() -> None:
    cfg = StreamConfig(name="S", allow_direct=False, max_msgs=0, sealed=False)
    assert encode(cfg) == b'{"name":"S","max_msgs":0,"allow_direct":false,"sealed":false}'


# =========================================================================== decoding


def test_decode_real_stream_create_reply() -> None:
    info = decode_response(STREAM_CREATE_REPLY, StreamInfo)
    cfg = info.config
    assert cfg.name == "S" and cfg.subjects == ["a.>"]
    assert cfg.retention is RetentionPolicy.LIMITS
    assert cfg.discard is DiscardPolicy.OLD
    assert cfg.storage is StorageType.FILE
    assert cfg.compression is Compression.NONE
    assert cfg.duplicate_window == 120.0 and cfg.max_age == 0.0
    assert cfg.max_msgs_per_subject == -1
    assert cfg.consumer_limits == StreamConsumerLimits()
    # Truncated to the microsecond (never later than the server's stamp), nanoseconds kept.
    assert info.created == datetime(2026, 11, 22, 1, 44, 53, 251628, tzinfo=UTC)
    assert isinstance(info.created, NatsTime) and info.created.nanosecond == 563
    assert info.created is not None and info.created.tzinfo is not None
    assert info.state.first_ts is None and info.state.last_ts is None  # Go zero time
    assert info.state.messages == 0 and info.state.consumer_count == 0
    assert info.ts is not None


def test_decode_real_consumer_create_reply() -> None:
    info = decode_response(CONSUMER_CREATE_REPLY, ConsumerInfo)
    assert info.stream_name == "S" and info.name == "E"
    cfg = info.config
    assert cfg.ack_policy is AckPolicy.EXPLICIT
    assert cfg.deliver_policy is DeliverPolicy.ALL
    assert cfg.ack_wait == 30.0 and cfg.inactive_threshold == 5.0 and cfg.priority_timeout == 1.0
    assert cfg.priority_groups == ["g"] and cfg.priority_policy is PriorityPolicy.PINNED_CLIENT
    assert info.priority_groups is not None and info.priority_groups[0].group == "g"
    assert info.priority_groups[0].pinned_ts is None


def test_decode_real_account_info() -> None:
    info = decode_response(ACCOUNT_INFO_REPLY, AccountInfo)
    assert info.storage == 35 and info.streams == 1 and info.consumers == 2
    assert info.limits.max_memory == -1 and info.limits.max_bytes_required is False
    assert info.api.level == 5 and info.api.total == 4 and info.api.errors == 1


def test_unknown_fields_tolerated_at_every_level() -> None:
    data = (
        b'{"future":1,"config":{"name":"S","brand_new_option":{"x":[1,2]},"consumer_limits":{"zzz":true}},'
        b'"state":{"messages":3,"new_counter":9},"cluster":{"leader":"n1","whatever":"x",'
        b'"replicas":[{"name":"n2","current":true,"active":1000,"peer":"p","mood":"good"}]}}'
    )
    info = decode_response(data, StreamInfo)
    assert info.config.name == "S" and info.state.messages == 3
    assert info.cluster is not None and info.cluster.replicas is not None
    assert info.cluster.replicas[0].active == pytest.approx(1e-6)


def test_unknown_enum_values_decode_as_pseudo_members() -> None:
    cfg = decode(b'{"name":"S","retention":"future_policy","storage":"file"}', StreamConfig)
    assert cfg.retention == "future_policy"
    assert isinstance(cfg.retention, RetentionPolicy)
    assert encode(cfg) == b'{"name":"S","retention":"future_policy","storage":"file"}'
    ci = decode(b'{"name":"C","config":{"ack_policy":"flow_control","deliver_policy":"undefined"}}', ConsumerInfo)
    assert ci.config.ack_policy is AckPolicy.FLOW_CONTROL
    assert ci.config.deliver_policy == "undefined"


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2026-11-22T01:44:53.251628563Z", datetime(2026, 11, 22, 1, 44, 53, 251628, tzinfo=UTC)),
        ("2026-11-22T01:44:53Z", datetime(2026, 11, 22, 1, 44, 53, tzinfo=UTC)),
        ("2026-11-22T03:44:53.1+02:00", datetime(2026, 11, 22, 1, 44, 53, 100000, tzinfo=UTC)),
    ],
)
def test_timestamps_with_nanoseconds(stamp: str, expected: datetime) -> None:
    info = decode(b'{"config":{"name":"S"},"created":"%s"}' % stamp.encode(), StreamInfo)
    assert info.created == expected
    assert info.created is not None and info.created.utcoffset() is not None
    assert isinstance(info.created, NatsTime)
    assert info.created.ns == jsapi_parse(stamp).ns  # the exact nanoseconds survive decoding


@pytest.mark.parametrize(
    ("body", "cls", "err_code"),
    [
        (b'{"error":{"code":404,"err_code":10059,"description":"stream not found"}}', errors.StreamNotFoundError, 10059),
        (
            b'{"error":{"code":400,"err_code":10058,"description":"stream name already in use with a different configuration"}}',
            errors.StreamNameInUseError,
            10058,
        ),
        (b'{"error":{"code":404,"err_code":10014,"description":"consumer not found"}}', errors.ConsumerNotFoundError, 10014),
        (b'{"error":{"code":400,"err_code":10148,"description":"consumer already exists"}}', errors.ConsumerExistsError, 10148),
        (b'{"error":{"code":400,"err_code":10149,"description":"consumer does not exist"}}', errors.ConsumerDoesNotExistError, 10149),
        (b'{"error":{"code":404,"err_code":10037,"description":"no message found"}}', errors.MsgNotFoundError, 10037),
        (b'{"error":{"code":500,"err_code":10057,"description":"no message found"}}', errors.MsgNotFoundError, 10057),
        (b'{"error":{"code":400,"err_code":10043,"description":"sequence 2 not found"}}', errors.MsgNotFoundError, 10043),
        (b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}', errors.WrongLastSequenceError, 10071),
        (
            b'{"error":{"code":503,"err_code":10077,"description":"maximum messages per subject exceeded"}}',
            errors.MaxMsgsPerSubjectError,
            10077,
        ),
        (b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}', errors.MaxMsgsError, 10077),
        (b'{"error":{"code":503,"err_code":10077,"description":"maximum bytes exceeded"}}', errors.MaxBytesError, 10077),
        (b'{"error":{"code":503,"err_code":10077,"description":"something else"}}', errors.StoreFailedError, 10077),
        (b'{"error":{"code":503,"err_code":10076,"description":"JetStream not enabled"}}', errors.JetStreamNotEnabledError, 10076),
        (
            b'{"error":{"code":503,"err_code":10039,"description":"JetStream not enabled for account"}}',
            errors.JetStreamNotEnabledForAccountError,
            10039,
        ),
        (b'{"error":{"code":503,"err_code":10023,"description":"insufficient resources"}}', errors.InsufficientResourcesError, 10023),
        (
            b'{"error":{"code":500,"err_code":10047,"description":"insufficient storage resources available"}}',
            errors.StorageResourcesExceededError,
            10047,
        ),
        (
            b'{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}',
            errors.DuplicateMsgIdInProcessError,
            10158,
        ),
        (
            b'{"error":{"code":400,"err_code":10100,"description":"filtered consumer not unique on workqueue stream"}}',
            errors.WorkQueueConsumerConflictError,
            10100,
        ),
        (b'{"error":{"code":400,"err_code":10065,"description":"subjects overlap with an existing stream"}}', errors.StreamSubjectOverlapError, 10065),
        (b'{"error":{"code":400,"err_code":10003,"description":"bad request"}}', errors.BadRequestError, 10003),
        (b'{"error":{"code":500,"err_code":99999,"description":"brand new"}}', errors.JetStreamAPIError, 99999),
        (b'{"error":{"code":503}}', errors.JetStreamAPIError, 0),
    ],
)
def test_error_bodies_raise_typed_errors(body: bytes, cls: type[errors.JetStreamAPIError], err_code: int) -> None:
    with pytest.raises(errors.JetStreamAPIError) as info:
        decode_response(body, StreamInfo)
    assert type(info.value) is cls
    assert info.value.err_code == err_code
    assert isinstance(info.value, errors.NatsError)


def test_storage_and_memory_errors_are_insufficient_resources() -> None:
    assert issubclass(errors.StorageResourcesExceededError, errors.InsufficientResourcesError)
    assert issubclass(errors.MemoryResourcesExceededError, errors.InsufficientResourcesError)
    assert issubclass(errors.MaxMsgsPerSubjectError, errors.StoreFailedError)


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1,2]", b'{"config":{"name":1}}', b'{"config":{"name":"S","max_age":"1s"}}',
     b'{"config":{"name":"S"},"created":"yesterday"}', b'{"config":{"name":"S","max_msgs":"1"}}', b"\xff\xfe"],
)
def test_malformed_responses_raise_jetstream_error(body: bytes) -> None:
    with pytest.raises(errors.JetStreamError):
        decode_response(body, StreamInfo)


def test_one_cached_decoder_per_type() -> None:
    decode_response(STREAM_CREATE_REPLY, StreamInfo)
    first = models._decoder(StreamInfo)
    decode_response(STREAM_CREATE_REPLY, StreamInfo)
    assert models._decoder(StreamInfo) is first
    assert models._decoder(ConsumerInfo) is not first


def test_pages_decode() -> None:
    page = decode_response(
        b'{"type":"x","total":300,"offset":256,"limit":256,"streams":["a","b"]}', StreamNamesResponse
    )
    assert (page.total, page.offset, page.limit, page.streams) == (300, 256, 256, ["a", "b"])
    page2 = decode_response(b'{"total":0,"offset":0,"limit":256,"streams":null}', StreamListResponse)
    assert page2.streams is None


def test_configs_pickle() -> None:
    cfg = StreamConfig(name="S", duplicate_window=30, retention=RetentionPolicy.INTEREST)
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and encode(back) == encode(cfg)


def test_repr_omits_unset_fields() -> None:
    assert repr(StreamConfig(name="S", max_age=1)) == "StreamConfig(name='S', max_age=1.0)"


# =========================================================================== round trips

_names = st.text(alphabet=st.characters(min_codepoint=48, max_codepoint=122, blacklist_characters="*>./\\"), min_size=1, max_size=20)
_tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
_subjects = st.lists(_tokens, min_size=1, max_size=4).map(".".join)
_durations = st.none() | st.integers(min_value=0, max_value=10**15).map(lambda ns: ns / 1e9)
_ints = st.none() | st.integers(min_value=-1, max_value=2**62)
_bools = st.none() | st.booleans()
_times = st.none() | st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


def _opt(strategy: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.none() | strategy


_transforms = st.builds(SubjectTransform, src=_subjects, dest=_subjects)
_sources = st.builds(
    StreamSource,
    name=_names,
    opt_start_seq=_opt(st.integers(1, 2**40)),
    opt_start_time=_times,
    filter_subject=_opt(_subjects),
    subject_transforms=_opt(st.lists(_transforms, max_size=2)),
    external=_opt(st.builds(ExternalStream, api=_subjects, deliver=_opt(_subjects))),
)

stream_configs = st.builds(
    StreamConfig,
    name=_names,
    description=_opt(st.text(max_size=30)),
    subjects=_opt(st.lists(_subjects, max_size=3)),
    retention=_opt(st.sampled_from(RetentionPolicy)),
    max_consumers=_ints,
    max_msgs=_ints,
    max_bytes=_ints,
    max_age=_durations,
    max_msgs_per_subject=_ints,
    max_msg_size=_opt(st.integers(-1, 2**31 - 1)),
    discard=_opt(st.sampled_from(DiscardPolicy)),
    storage=_opt(st.sampled_from(StorageType)),
    num_replicas=_opt(st.integers(1, 5)),
    no_ack=_bools,
    duplicate_window=_durations,
    placement=_opt(st.builds(Placement, cluster=_opt(_names), tags=_opt(st.lists(_names, max_size=2)))),
    mirror=_opt(_sources),
    sources=_opt(st.lists(_sources, max_size=2)),
    compression=_opt(st.sampled_from(Compression)),
    first_seq=_opt(st.integers(1, 2**40)),
    subject_transform=_opt(_transforms),
    republish=_opt(st.builds(RePublish, src=_opt(_subjects), dest=_subjects, headers_only=_bools)),
    allow_direct=_bools,
    mirror_direct=_bools,
    discard_new_per_subject=_bools,
    sealed=_bools,
    deny_delete=_bools,
    deny_purge=_bools,
    allow_rollup_hdrs=_bools,
    consumer_limits=_opt(
        st.builds(StreamConsumerLimits, inactive_threshold=_durations, max_ack_pending=_opt(st.integers(1, 10**6)))
    ),
    allow_msg_ttl=_bools,
    subject_delete_marker_ttl=_durations,
    allow_msg_counter=_bools,
    allow_atomic=_bools,
    allow_msg_schedules=_bools,
    persist_mode=_opt(st.sampled_from(PersistMode)),
    allow_batched=_bools,
    metadata=_opt(st.dictionaries(_names, st.text(max_size=10), max_size=3)),
)


@settings(max_examples=300, deadline=None)
@given(stream_configs)
def test_stream_config_round_trip(cfg: StreamConfig) -> None:
    data = encode(cfg)
    back = decode(data, StreamConfig)
    assert back == cfg
    assert encode(back) == data
    # The wire form holds integer nanoseconds, never floats, for every duration.
    raw = msgspec.json.decode(data)
    for key in ("max_age", "duplicate_window", "subject_delete_marker_ttl"):
        if key in raw:
            assert isinstance(raw[key], int)
    # Unset fields are not sent.
    assert set(raw) == {f for f in StreamConfig.__struct_fields__ if getattr(cfg, f) is not None}


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        ConsumerConfig,
        durable_name=_opt(_names),
        ack_wait=_durations,
        backoff=_opt(st.lists(st.integers(1, 10**12).map(lambda ns: ns / 1e9), max_size=4)),
        opt_start_time=_times,
        pause_until=_times,
        deliver_policy=_opt(st.sampled_from(DeliverPolicy)),
        ack_policy=_opt(st.sampled_from(AckPolicy)),
        priority_policy=_opt(st.sampled_from(PriorityPolicy)),
        priority_timeout=_durations,
        filter_subjects=_opt(st.lists(_subjects, max_size=3)),
    )
)
def test_consumer_config_round_trip(cfg: ConsumerConfig) -> None:
    back = decode(encode(cfg), ConsumerConfig)
    assert back == cfg


# =========================================================================== odd but valid responses (TESTPLAN "API JSON responses")


def test_durations_sent_as_floats_are_accepted() -> None:
    assert decode(b'{"name":"S","max_age":1.5e9,"duplicate_window":120000000000.0}', StreamConfig).max_age == 1.5


def test_big_and_negative_numbers() -> None:
    info = decode(
        b'{"config":{"name":"S","max_msgs":-1},"state":{"messages":18446744073709551615,"last_seq":18446744073709551615},'
        b'"cluster":{"replicas":[{"name":"n","active":-1}]}}',
        StreamInfo,
    )
    assert info.state.last_seq == 2**64 - 1 and info.config.max_msgs == -1
    assert info.cluster is not None and info.cluster.replicas is not None
    assert info.cluster.replicas[0].active == pytest.approx(-1e-9)


def test_deeply_nested_unknown_field_is_skipped_or_refused_cleanly() -> None:
    deep = b'{"config":{"name":"S"},"x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    try:
        info = decode_response(deep, StreamInfo)
    except errors.JetStreamError:
        return  # refused with the typed error: fine
    assert info.config.name == "S"


@pytest.mark.parametrize("body", [b'{"config":{"name":"S"},"state":{"messages":"1"}}', b'{"config":{"name":"S","allow_direct":"yes"}}'])
def test_wrong_types_refused(body: bytes) -> None:
    with pytest.raises(errors.JetStreamError):
        decode_response(body, StreamInfo)


# Error bodies the strict decoders refuse still raise their typed error (found by the apijson
# fuzz target): a repeated key resolves to its last value, as the server's JSON decoder does,
# and a field of the wrong type counts as absent.
ODD_ERROR_BODIES = [
    (
        b'{"error":{"code":503,"err_code":10077,"description":7,"description":"maximum messages perd"}}',
        errors.StoreFailedError, (503, 10077, "maximum messages perd"),
    ),
    (b'{"error":{"code":"500","err_code":1}}', errors.JetStreamAPIError, (0, 1, "")),
    (b'{"error":{"code":404,"err_code":10059,"description":null}}', errors.StreamNotFoundError, (404, 10059, "")),
    (b'{"error":{"err_code":10059,"description":"stream not found"}}', errors.StreamNotFoundError, (0, 10059, "stream not found")),
    (b'{"error":{"code":true,"err_code":1.5,"description":["x"]}}', errors.JetStreamAPIError, (0, 0, "")),
    (b'{"error":{"code":"x"},"error":{"code":404,"err_code":10014}}', errors.ConsumerNotFoundError, (404, 10014, "")),
    (b'{"error":{"code":0},"stream":null}', errors.JetStreamAPIError, (0, 0, "")),
]  # fmt: skip


@pytest.mark.parametrize(("body", "cls", "fields"), ODD_ERROR_BODIES)
def test_odd_error_bodies_raise_typed_errors(body: bytes, cls: type[errors.JetStreamAPIError], fields: tuple[int, int, str]) -> None:
    from jscore.publish import decode_ack

    for decode_one in (lambda d: decode_response(d, StreamInfo), models.decode_pub_ack, decode_ack):
        with pytest.raises(errors.JetStreamAPIError) as info:
            decode_one(body)
        assert type(info.value) is cls
        assert (info.value.code, info.value.err_code, info.value.description) == fields


@pytest.mark.parametrize("body", [b'{"error":"boom"}', b'{"error":[1]}', b'{"error":5}', b"[]", b'{"error":{"code":1}'])
def test_error_that_is_not_an_object_is_a_malformed_response(body: bytes) -> None:
    for decode_one in (lambda d: decode_response(d, StreamInfo), models.decode_pub_ack):
        with pytest.raises(errors.JetStreamError) as info:
            decode_one(body)
        assert not isinstance(info.value, errors.JetStreamAPIError)
