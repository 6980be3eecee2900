"""JetStream API models: msgspec Structs named and shaped as nats-server's JSON.

Conventions:

* Field names are the server's JSON names (``max_msgs_per_subject``, ``durable_name`` ...);
  field order follows the server's structs, so encoded requests are stable byte for byte.
* Durations are float seconds in Python and integer nanoseconds on the wire. Such fields are
  typed :data:`Duration` (a ``float`` subclass at run time, plain ``float`` for type checkers):
  ``StreamConfig(duplicate_window=120.0)`` encodes ``"duplicate_window":120000000000`` and
  decodes back to ``120.0``. Ints and floats assigned later are converted when encoding.
* Timestamps are timezone-aware :class:`datetime.datetime` values (RFC 3339 on the wire).
  Every timestamp decoded from the server is a :class:`~jscore.times.NatsTime`: a datetime
  truncated to microseconds that keeps the server's nanoseconds, and is sent back with all of
  them (``opt_start_time=msg.time`` starts exactly at that message). Go's zero time
  (``0001-01-01T00:00:00Z``, "never") decodes as ``None``. A naive datetime in a request is
  refused (:class:`~jscore.errors.InvalidOptionError`).
* Enums hold the wire strings; a value this client does not know yet (a newer server) decodes
  as a pseudo-member of the enum instead of failing.
* Server-defaulted fields default to ``None`` and are not sent (``omit_defaults``); unknown
  response fields are ignored; one cached decoder per response type.
"""

from __future__ import annotations

import difflib
import enum
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeVar, Union

import msgspec

from .errors import InvalidOptionError, JetStreamAPIError, JetStreamError, api_error
from .headers import Headers
from .times import NatsTime, format_rfc3339, parse_nats_time

__all__ = [
    # enums
    "RetentionPolicy",
    "DiscardPolicy",
    "StorageType",
    "Compression",
    "PersistMode",
    "AckPolicy",
    "DeliverPolicy",
    "ReplayPolicy",
    "PriorityPolicy",
    # building blocks
    "Duration",
    "ApiError",
    "SubjectTransform",
    "RePublish",
    "Placement",
    "ExternalStream",
    "StreamConsumerSource",
    "StreamSource",
    "StreamConsumerLimits",
    "PeerInfo",
    "ClusterInfo",
    "StreamSourceInfo",
    "StreamAlternate",
    "LostStreamData",
    # streams
    "StreamConfig",
    "StreamState",
    "StreamInfo",
    # consumers
    "ConsumerConfig",
    "SequenceInfo",
    "PriorityGroupState",
    "ConsumerInfo",
    # account
    "AccountLimits",
    "ApiStats",
    "AccountTier",
    "AccountInfo",
    # messages
    "PubAck",
    "StoredMsg",
    "RawStoredMsg",
    # responses
    "StreamNamesResponse",
    "StreamListResponse",
    "ConsumerNamesResponse",
    "ConsumerListResponse",
    "SuccessResponse",
    "PauseResponse",
    "PurgeResponse",
    "MsgGetResponse",
    "StreamInfoResponse",
    # keyword configs
    "StreamConfigFields",
    "ConsumerConfigFields",
    "config_from_fields",
    "check_config",
    "spell_out_fields",
    # functions
    "decode_pub_ack",
    "decode_response",
    "decode",
    "encode",
]

T = TypeVar("T")

NS_PER_SECOND: Final = 1_000_000_000


# =========================================================================== durations

if TYPE_CHECKING:
    Duration = float
    _Time = datetime  # a datetime to type checkers (users pass plain datetimes) ...
else:
    _Time = NatsTime  # ... and decoded by msgspec as the exact NatsTime (see _dec_hook)

    class Duration(float):
        """Seconds (a float) that travel as integer nanoseconds."""

        __slots__ = ()

        def __repr__(self) -> str:
            return float.__repr__(self)


def _to_duration(value: object, field: str) -> Duration:
    if isinstance(value, Duration):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOptionError(f"{field} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise InvalidOptionError(f"{field} must be finite, got {value!r}")
    return Duration(value)


def duration_to_ns(seconds: float) -> int:
    """Float seconds to integer nanoseconds (rounded to the nearest nanosecond)."""
    return int(round(seconds * NS_PER_SECOND))


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, Duration):
        return duration_to_ns(obj)
    if isinstance(obj, NatsTime):
        if obj.nanosecond:
            return format_rfc3339(obj)  # all nine digits: the server matches them exactly
        # Nothing below the microsecond: the same text as the equal plain datetime.
        return datetime(obj.year, obj.month, obj.day, obj.hour, obj.minute, obj.second, obj.microsecond, obj.tzinfo)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def _dec_hook(type_: type, obj: Any) -> Any:
    if type_ is Duration:
        if isinstance(obj, bool) or not isinstance(obj, (int, float)):
            raise TypeError(f"expected a duration in nanoseconds, got {obj!r}")
        return Duration(obj / NS_PER_SECOND)
    if type_ is NatsTime:
        if not isinstance(obj, str):
            raise TypeError(f"expected an RFC 3339 timestamp, got {obj!r}")
        return parse_nats_time(obj)  # (a ValueError is reported by msgspec as a DecodeError)
    raise NotImplementedError(f"cannot decode {type_!r}")


# =========================================================================== enums


class _WireEnum(str, enum.Enum):
    """A str enum holding the wire value. An unknown value (a newer server) becomes a
    pseudo-member rather than an error, so listings keep working."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        return member

    def __str__(self) -> str:
        return str(self.value)


class RetentionPolicy(_WireEnum):
    LIMITS = "limits"
    INTEREST = "interest"
    WORKQUEUE = "workqueue"


class DiscardPolicy(_WireEnum):
    OLD = "old"
    NEW = "new"


class StorageType(_WireEnum):
    FILE = "file"
    MEMORY = "memory"


class Compression(_WireEnum):
    NONE = "none"
    S2 = "s2"


class PersistMode(_WireEnum):
    DEFAULT = "default"
    ASYNC = "async"


class AckPolicy(_WireEnum):
    EXPLICIT = "explicit"
    ALL = "all"
    NONE = "none"
    FLOW_CONTROL = "flow_control"


class DeliverPolicy(_WireEnum):
    ALL = "all"
    LAST = "last"
    NEW = "new"
    BY_START_SEQUENCE = "by_start_sequence"
    BY_START_TIME = "by_start_time"
    LAST_PER_SUBJECT = "last_per_subject"


class ReplayPolicy(_WireEnum):
    INSTANT = "instant"
    ORIGINAL = "original"


class PriorityPolicy(_WireEnum):
    NONE = "none"
    OVERFLOW = "overflow"
    PINNED_CLIENT = "pinned_client"
    PRIORITIZED = "prioritized"


# =========================================================================== coercion
#
# Each model class gets a plan (computed once from its type hints) naming the fields that need
# attention: durations, enums, datetimes, nested models. ``__post_init__`` (construction and
# decoding) applies it shallowly; :func:`encode` applies it deeply, so values assigned after
# construction are converted too.

_DUR, _DUR_LIST, _ENUM, _DT, _MODEL, _MODEL_LIST, _MODEL_DICT = range(7)
_plans: dict[type, tuple[tuple[str, int, Any], ...]] = {}


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _plan(cls: type) -> tuple[tuple[str, int, Any], ...]:
    plan = _plans.get(cls)
    if plan is not None:
        return plan
    hints = typing.get_type_hints(cls)
    steps: list[tuple[str, int, Any]] = []
    for name in getattr(cls, "__struct_fields__", ()):
        tp = _strip_optional(hints[name])
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if tp is Duration:
            steps.append((name, _DUR, None))
        elif tp is datetime or tp is NatsTime:
            steps.append((name, _DT, None))
        elif isinstance(tp, type) and issubclass(tp, _WireEnum):
            steps.append((name, _ENUM, tp))
        elif isinstance(tp, type) and issubclass(tp, _Model):
            steps.append((name, _MODEL, tp))
        elif origin is list and args and args[0] is Duration:
            steps.append((name, _DUR_LIST, None))
        elif origin is list and args and isinstance(args[0], type) and issubclass(args[0], _Model):
            steps.append((name, _MODEL_LIST, args[0]))
        elif origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], _Model):
            steps.append((name, _MODEL_DICT, args[1]))
    plan = _plans[cls] = tuple(steps)
    return plan


def _coerce(obj: _Model, *, deep: bool) -> None:
    cls = type(obj)
    for name, kind, extra in _plan(cls):
        value = getattr(obj, name)
        if value is None:
            continue
        where = f"{cls.__name__}.{name}"
        if kind == _DUR:
            if type(value) is not Duration:
                msgspec.structs.force_setattr(obj, name, _to_duration(value, where))
        elif kind == _DT:
            if not isinstance(value, datetime):
                raise InvalidOptionError(f"{where} must be a datetime, got {value!r}")
            if value.tzinfo is None or value.utcoffset() is None:
                raise InvalidOptionError(f"{where} must be timezone-aware, got {value!r}")
            if value.year == 1:  # Go's zero time: "never"
                msgspec.structs.force_setattr(obj, name, None)
        elif kind == _ENUM:
            if type(value) is not extra:
                if not isinstance(value, str) or value not in extra._value2member_map_:
                    # (a value a newer server sent decodes as a pseudo-member and passes; a
                    # string from the caller must be one this client knows: a typo is refused)
                    known = ", ".join(repr(v) for v in extra._value2member_map_)
                    raise InvalidOptionError(f"{where} must be a {extra.__name__} ({known}), got {value!r}")
                msgspec.structs.force_setattr(obj, name, extra(value))
        elif kind == _DUR_LIST:
            if not isinstance(value, (list, tuple)):
                raise InvalidOptionError(f"{where} must be a list of seconds, got {value!r}")
            if type(value) is not list or any(type(v) is not Duration for v in value):
                msgspec.structs.force_setattr(obj, name, [_to_duration(v, where) for v in value])
        elif deep:
            if kind == _MODEL:
                _coerce(value, deep=True)
            elif kind == _MODEL_LIST:
                for item in value:
                    _coerce(item, deep=True)
            elif kind == _MODEL_DICT:
                for item in value.values():
                    _coerce(item, deep=True)


class _Model(msgspec.Struct, kw_only=True, omit_defaults=True, repr_omit_defaults=True):
    """Base of every JetStream model: keyword-only, unset (default) fields are not encoded."""

    def __post_init__(self) -> None:
        if _plan(type(self)):
            _coerce(self, deep=False)


# =========================================================================== building blocks


class ApiError(msgspec.Struct, frozen=True):
    """The ``error`` object of a failed JetStream API response."""

    code: int
    err_code: int = 0
    description: str = ""

    def to_exception(self) -> JetStreamAPIError:
        return api_error(self.code, self.err_code, self.description)


class SubjectTransform(_Model, kw_only=True):
    """A subject transform: messages matching ``src`` are re-subjected to ``dest``."""

    src: str
    dest: str


class RePublish(_Model, kw_only=True):
    """Republish stored messages matching ``src`` to ``dest`` (optionally headers only)."""

    src: str | None = None
    dest: str
    headers_only: bool | None = None


class Placement(_Model, kw_only=True):
    """Where a stream should be placed: a cluster name and/or server tags."""

    cluster: str | None = None
    tags: list[str] | None = None
    preferred: str | None = None


def check_placement(placement: object) -> Placement | None:
    """``placement`` if it is None or a :class:`Placement`, else :class:`InvalidOptionError`."""
    if placement is not None and not isinstance(placement, Placement):
        raise InvalidOptionError(f"placement must be a Placement, got {type(placement).__name__}")
    return placement


class ExternalStream(_Model, kw_only=True):
    """A stream source in another account or JetStream domain: its API prefix and the prefix
    the source's push consumer delivers to."""

    api: str
    deliver: str | None = None


class StreamConsumerSource(_Model, kw_only=True):
    """A named durable consumer used for sourcing (nats-server 2.14+)."""

    name: str | None = None
    deliver_subject: str | None = None


class StreamSource(_Model, kw_only=True):
    """A source (or the mirror) of a stream."""

    name: str
    opt_start_seq: int | None = None
    opt_start_time: _Time | None = None
    filter_subject: str | None = None
    subject_transforms: list[SubjectTransform] | None = None
    external: ExternalStream | None = None
    consumer: StreamConsumerSource | None = None


class StreamConsumerLimits(_Model, kw_only=True):
    """Defaults and limits applied to the consumers of a stream."""

    inactive_threshold: Duration | None = None
    max_ack_pending: int | None = None


class PeerInfo(_Model, kw_only=True):
    name: str = ""
    current: bool = False
    offline: bool = False
    active: Duration | None = None
    lag: int = 0
    peer: str = ""


class ClusterInfo(_Model, kw_only=True):
    name: str | None = None
    raft_group: str | None = None
    leader: str | None = None
    leader_since: _Time | None = None
    system_account: bool = False
    traffic_account: str | None = None
    replicas: list[PeerInfo] | None = None


class StreamSourceInfo(_Model, kw_only=True):
    name: str = ""
    external: ExternalStream | None = None
    lag: int = 0
    active: Duration | None = None
    error: ApiError | None = None
    filter_subject: str | None = None
    subject_transforms: list[SubjectTransform] | None = None


class StreamAlternate(_Model, kw_only=True):
    name: str = ""
    domain: str | None = None
    cluster: str = ""


class LostStreamData(_Model, kw_only=True):
    msgs: list[int] | None = None
    bytes: int = 0


# =========================================================================== streams


class StreamConfig(_Model, kw_only=True):
    """A stream's configuration. Only ``name`` is required; every field left ``None`` takes the
    server's default (``retention`` limits, ``storage`` file, ``discard`` old, limits -1,
    ``duplicate_window`` 2 min, ``num_replicas`` 1 ...)."""

    name: str
    description: str | None = None
    subjects: list[str] | None = None
    retention: RetentionPolicy | None = None
    max_consumers: int | None = None
    max_msgs: int | None = None
    max_bytes: int | None = None
    max_age: Duration | None = None
    max_msgs_per_subject: int | None = None
    max_msg_size: int | None = None
    discard: DiscardPolicy | None = None
    storage: StorageType | None = None
    num_replicas: int | None = None
    no_ack: bool | None = None
    template_owner: str | None = None
    duplicate_window: Duration | None = None
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource] | None = None
    compression: Compression | None = None
    first_seq: int | None = None
    subject_transform: SubjectTransform | None = None
    republish: RePublish | None = None
    allow_direct: bool | None = None
    mirror_direct: bool | None = None
    discard_new_per_subject: bool | None = None
    sealed: bool | None = None
    deny_delete: bool | None = None
    deny_purge: bool | None = None
    allow_rollup_hdrs: bool | None = None
    consumer_limits: StreamConsumerLimits | None = None
    allow_msg_ttl: bool | None = None
    subject_delete_marker_ttl: Duration | None = None
    allow_msg_counter: bool | None = None
    allow_atomic: bool | None = None
    allow_msg_schedules: bool | None = None
    persist_mode: PersistMode | None = None
    allow_batched: bool | None = None
    metadata: dict[str, str] | None = None


class StreamState(_Model, kw_only=True):
    messages: int = 0
    bytes: int = 0
    first_seq: int = 0
    first_ts: _Time | None = None
    last_seq: int = 0
    last_ts: _Time | None = None
    num_subjects: int = 0
    subjects: dict[str, int] | None = None
    num_deleted: int = 0
    deleted: list[int] | None = None
    lost: LostStreamData | None = None
    consumer_count: int = 0


class StreamInfo(_Model, kw_only=True):
    config: StreamConfig
    created: _Time | None = None
    state: StreamState = msgspec.field(default_factory=StreamState)
    domain: str | None = None
    cluster: ClusterInfo | None = None
    mirror: StreamSourceInfo | None = None
    sources: list[StreamSourceInfo] | None = None
    alternates: list[StreamAlternate] | None = None
    ts: _Time | None = None


# =========================================================================== consumers


class ConsumerConfig(_Model, kw_only=True):
    """A consumer's configuration. Leave ``durable_name`` and ``name`` unset for an ephemeral
    consumer. ``ack_policy`` left unset is sent as ``explicit`` by the client (the server's own
    default is ``none``)."""

    durable_name: str | None = None
    name: str | None = None
    description: str | None = None
    deliver_policy: DeliverPolicy | None = None
    opt_start_seq: int | None = None
    opt_start_time: _Time | None = None
    ack_policy: AckPolicy | None = None
    ack_wait: Duration | None = None
    max_deliver: int | None = None
    backoff: list[Duration] | None = None
    filter_subject: str | None = None
    filter_subjects: list[str] | None = None
    replay_policy: ReplayPolicy | None = None
    rate_limit_bps: int | None = None
    sample_freq: str | None = None
    max_waiting: int | None = None
    max_ack_pending: int | None = None
    flow_control: bool | None = None
    headers_only: bool | None = None
    max_batch: int | None = None
    max_expires: Duration | None = None
    max_bytes: int | None = None
    deliver_subject: str | None = None
    deliver_group: str | None = None
    idle_heartbeat: Duration | None = None
    inactive_threshold: Duration | None = None
    num_replicas: int | None = None
    mem_storage: bool | None = None
    metadata: dict[str, str] | None = None
    pause_until: _Time | None = None
    priority_groups: list[str] | None = None
    priority_policy: PriorityPolicy | None = None
    priority_timeout: Duration | None = None


class StreamConfigFields(TypedDict, total=False):
    """The fields of :class:`StreamConfig` as keywords: the typed ``**fields`` of
    ``create_stream`` / ``update_stream`` / ``create_or_update_stream``. The model's names and
    types (an enum also as its wire string, a duration as float seconds); a test keeps the two
    in step."""

    name: str
    description: str | None
    subjects: list[str] | None
    retention: RetentionPolicy | str | None
    max_consumers: int | None
    max_msgs: int | None
    max_bytes: int | None
    max_age: float | None
    max_msgs_per_subject: int | None
    max_msg_size: int | None
    discard: DiscardPolicy | str | None
    storage: StorageType | str | None
    num_replicas: int | None
    no_ack: bool | None
    template_owner: str | None
    duplicate_window: float | None
    placement: Placement | None
    mirror: StreamSource | None
    sources: list[StreamSource] | None
    compression: Compression | str | None
    first_seq: int | None
    subject_transform: SubjectTransform | None
    republish: RePublish | None
    allow_direct: bool | None
    mirror_direct: bool | None
    discard_new_per_subject: bool | None
    sealed: bool | None
    deny_delete: bool | None
    deny_purge: bool | None
    allow_rollup_hdrs: bool | None
    consumer_limits: StreamConsumerLimits | None
    allow_msg_ttl: bool | None
    subject_delete_marker_ttl: float | None
    allow_msg_counter: bool | None
    allow_atomic: bool | None
    allow_msg_schedules: bool | None
    persist_mode: PersistMode | str | None
    allow_batched: bool | None
    metadata: dict[str, str] | None


class ConsumerConfigFields(TypedDict, total=False):
    """The fields of :class:`ConsumerConfig` as keywords: the typed ``**fields`` of
    ``create_consumer`` / ``update_consumer`` / ``create_or_update_consumer``. The model's names and
    types (an enum also as its wire string, a duration as float seconds); a test keeps the two
    in step."""

    durable_name: str | None
    name: str | None
    description: str | None
    deliver_policy: DeliverPolicy | str | None
    opt_start_seq: int | None
    opt_start_time: datetime | None
    ack_policy: AckPolicy | str | None
    ack_wait: float | None
    max_deliver: int | None
    backoff: list[float] | None
    filter_subject: str | None
    filter_subjects: list[str] | None
    replay_policy: ReplayPolicy | str | None
    rate_limit_bps: int | None
    sample_freq: str | None
    max_waiting: int | None
    max_ack_pending: int | None
    flow_control: bool | None
    headers_only: bool | None
    max_batch: int | None
    max_expires: float | None
    max_bytes: int | None
    deliver_subject: str | None
    deliver_group: str | None
    idle_heartbeat: float | None
    inactive_threshold: float | None
    num_replicas: int | None
    mem_storage: bool | None
    metadata: dict[str, str] | None
    pause_until: datetime | None
    priority_groups: list[str] | None
    priority_policy: PriorityPolicy | str | None
    priority_timeout: float | None


# =========================================================================== keyword configs

_M = TypeVar("_M", bound="_Model")


def config_from_fields(cls: type[_M], config: _M | None, fields: Mapping[str, object], call: str) -> _M:
    """The config of ``call`` (a method name, for messages) from a ``cls`` object and/or its
    fields as keywords (the keywords override the object's fields).

    A keyword that is not a field of ``cls`` is a :class:`TypeError` naming it and the closest
    field, as Python's own for a misspelled keyword; a missing required field or a config of
    another class is an :class:`InvalidOptionError`. Field values are checked by
    :func:`check_config` when the request is built."""
    known = cls.__struct_fields__
    for key in fields:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"{call}() got an unexpected keyword argument {key!r}{hint}")
    if config is None:
        defaults = len(cls.__struct_defaults__)
        required = known[: len(known) - defaults] if defaults else known
        missing = [f for f in required if f not in fields]
        if missing:
            raise InvalidOptionError(f"{call}: {cls.__name__}.{missing[0]} is required")
        return cls(**fields)
    if not isinstance(config, cls):
        raise InvalidOptionError(f"config must be a {cls.__name__}, got {type(config).__name__}")
    return msgspec.structs.replace(config, **fields) if fields else config


def _field_path(path: str) -> str:
    """``$.placement.tags[0]`` (msgspec's path of a value) as ``placement.tags[0]``."""
    return path[2:] if path.startswith("$.") else path.lstrip("$")


def check_config(cfg: _Model) -> bytes:
    """The JSON of a request config, once every field (nested ones too) has the model's type:
    else an :class:`InvalidOptionError` naming the field (``StreamConfig.max_msgs: ...``). The
    check encodes the config and decodes it back strictly, with the decoder of responses."""
    name = type(cfg).__name__
    try:
        body = encode(cfg)
    except (TypeError, NotImplementedError, ValueError, OverflowError) as exc:
        for field in cfg.__struct_fields__:  # (the error path only: which field was it?)
            try:
                _encoder.encode(getattr(cfg, field))
            except (TypeError, NotImplementedError, ValueError, OverflowError) as field_exc:
                raise InvalidOptionError(f"{name}.{field}: {field_exc}") from None
        raise InvalidOptionError(f"{name}: {exc}") from None
    try:
        _decoder(type(cfg)).decode(body)
    except msgspec.ValidationError as exc:
        text, _, path = str(exc).rpartition(" - at `")
        if not text:
            raise InvalidOptionError(f"{name}: {exc}") from None
        where = _field_path(path.rstrip("`"))
        raise InvalidOptionError(f"{name}.{where}: {text[0].lower()}{text[1:]}") from None
    return body


_F = TypeVar("_F", bound=Callable[..., Any])


def spell_out_fields(fields: type) -> Callable[[_F], _F]:
    """A decorator: ``help()`` shows the ``**fields`` of the method as one keyword-only
    parameter per key of the TypedDict ``fields`` (default None: not given), the TypedDict
    that types them for mypy. Only for display: the keywords are checked by
    :func:`config_from_fields`."""

    def give(func: _F) -> _F:
        sig = inspect.signature(func)
        params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        for key, ann in fields.__annotations__.items():
            text = ann.__forward_arg__ if isinstance(ann, typing.ForwardRef) else ann
            params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=text))
        func.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        return func

    return give


class SequenceInfo(_Model, kw_only=True):
    consumer_seq: int = 0
    stream_seq: int = 0
    last_active: _Time | None = None


class PriorityGroupState(_Model, kw_only=True):
    group: str = ""
    pinned_client_id: str | None = None
    pinned_ts: _Time | None = None


class ConsumerInfo(_Model, kw_only=True):
    stream_name: str = ""
    name: str = ""
    config: ConsumerConfig = msgspec.field(default_factory=ConsumerConfig)
    created: _Time | None = None
    delivered: SequenceInfo = msgspec.field(default_factory=SequenceInfo)
    ack_floor: SequenceInfo = msgspec.field(default_factory=SequenceInfo)
    num_ack_pending: int = 0
    num_redelivered: int = 0
    num_waiting: int = 0
    num_pending: int = 0
    cluster: ClusterInfo | None = None
    push_bound: bool = False
    paused: bool = False
    pause_remaining: Duration | None = None
    ts: _Time | None = None
    priority_groups: list[PriorityGroupState] | None = None


# =========================================================================== account


class AccountLimits(_Model, kw_only=True):
    max_memory: int = 0
    max_storage: int = 0
    max_streams: int = 0
    max_consumers: int = 0
    max_ack_pending: int = 0
    memory_max_stream_bytes: int = 0
    storage_max_stream_bytes: int = 0
    max_bytes_required: bool = False


class ApiStats(_Model, kw_only=True):
    level: int = 0
    total: int = 0
    errors: int = 0
    inflight: int = 0


class AccountTier(_Model, kw_only=True):
    memory: int = 0
    storage: int = 0
    reserved_memory: int = 0
    reserved_storage: int = 0
    streams: int = 0
    consumers: int = 0
    limits: AccountLimits = msgspec.field(default_factory=AccountLimits)


class AccountInfo(_Model, kw_only=True):
    """``$JS.API.INFO``: usage, limits and API statistics of this account."""

    memory: int = 0
    storage: int = 0
    reserved_memory: int = 0
    reserved_storage: int = 0
    streams: int = 0
    consumers: int = 0
    limits: AccountLimits = msgspec.field(default_factory=AccountLimits)
    domain: str | None = None
    api: ApiStats = msgspec.field(default_factory=ApiStats)
    tiers: dict[str, AccountTier] | None = None


# =========================================================================== messages


class PubAck(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The acknowledgement of a stored (or deduplicated) message."""

    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None


class StoredMsg(msgspec.Struct, frozen=True, kw_only=True):
    """A message read from a stream (``get_msg`` / ``direct_get``). ``headers`` are the
    message's own headers (None when it had none), ``time`` when it was stored."""

    subject: str
    seq: int
    data: bytes = b""
    headers: Headers | None = None
    time: datetime | None = None
    stream: str = ""


class RawStoredMsg(_Model, kw_only=True):
    """The ``message`` object of a ``STREAM.MSG.GET`` response (base64 data and headers)."""

    subject: str = ""
    seq: int = 0
    hdrs: bytes | None = None
    data: bytes | None = None
    time: _Time | None = None


# =========================================================================== responses


class _Page(_Model, kw_only=True):
    total: int = 0
    offset: int = 0
    limit: int = 0


class StreamNamesResponse(_Page, kw_only=True):
    streams: list[str] | None = None


class StreamListResponse(_Page, kw_only=True):
    streams: list[StreamInfo] | None = None
    missing: list[str] | None = None
    offline: dict[str, str] | None = None


class ConsumerNamesResponse(_Page, kw_only=True):
    consumers: list[str] | None = None


class ConsumerListResponse(_Page, kw_only=True):
    consumers: list[ConsumerInfo] | None = None
    missing: list[str] | None = None
    offline: dict[str, str] | None = None


class PauseResponse(_Model, kw_only=True):
    """The answer to ``CONSUMER.PAUSE``: whether the consumer is paused now, until when, and
    for how much longer (seconds)."""

    paused: bool = False
    pause_until: _Time | None = None
    pause_remaining: Duration | None = None


class SuccessResponse(_Model, kw_only=True):
    success: bool = False


class PurgeResponse(_Model, kw_only=True):
    success: bool = False
    purged: int = 0


class MsgGetResponse(_Model, kw_only=True):
    message: RawStoredMsg = msgspec.field(default_factory=RawStoredMsg)


class StreamInfoResponse(StreamInfo, kw_only=True):
    """``STREAM.INFO`` with a ``subjects_filter``: the info plus the paging of its subjects."""

    total: int = 0
    offset: int = 0
    limit: int = 0


# =========================================================================== codec


class _PubAckResponse(msgspec.Struct, frozen=True, kw_only=True):
    error: ApiError | None = None
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    domain: str | None = None


class _ErrorProbe(msgspec.Struct, frozen=True):
    error: ApiError | None = None


class _LooseErrorProbe(msgspec.Struct, frozen=True):
    error: Any = None


_pub_ack_decoder: Final = msgspec.json.Decoder(_PubAckResponse)
_error_probe: Final = msgspec.json.Decoder(_ErrorProbe)
_loose_error_probe: Final = msgspec.json.Decoder(_LooseErrorProbe)
_decoders: dict[Any, Any] = {}
_encoder: Final = msgspec.json.Encoder(enc_hook=_enc_hook)


def _loose_api_error(data: bytes) -> JetStreamAPIError | None:
    """The typed error of a body whose ``error`` object the strict decoders refused (a field of
    the wrong type, a missing ``code``, a repeated key whose first value has the wrong type), or
    None when ``data`` has no ``error`` object. Repeated keys resolve to their last value, as
    the server's JSON decoder does; a field of the wrong type counts as absent (0, 0, "").
    Only called after a strict decode failed: never on the path of a well-formed answer."""
    try:
        err = _loose_error_probe.decode(data).error
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if type(err) is not dict:
        return None
    code, err_code, description = err.get("code"), err.get("err_code"), err.get("description")
    return api_error(
        code if type(code) is int else 0,
        err_code if type(err_code) is int else 0,
        description if type(description) is str else "",
    )


def decode_pub_ack(data: bytes) -> PubAck:
    """Decode a PubAck reply; an error body raises its typed :class:`JetStreamAPIError`."""
    try:
        r = _pub_ack_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        typed = _loose_api_error(data) if isinstance(exc, msgspec.ValidationError) else None
        if typed is not None:
            raise typed from exc
        raise JetStreamError(f"invalid PubAck {data[:128]!r}: {exc}") from exc
    if r.error is not None:
        raise r.error.to_exception()
    if not r.stream or r.seq <= 0:
        raise JetStreamError(f"invalid PubAck (no stream or sequence): {data[:128]!r}")
    return PubAck(stream=r.stream, seq=r.seq, duplicate=r.duplicate, domain=r.domain)


def _decoder(type_: Any) -> Any:
    dec = _decoders.get(type_)
    if dec is None:
        dec = _decoders[type_] = msgspec.json.Decoder(type_, dec_hook=_dec_hook)
    return dec


def decode(data: bytes, type_: type[T]) -> T:
    """Decode JSON into a model (no error-body check), with the cached decoder of ``type_``.
    Invalid JSON or a shape mismatch raises :class:`JetStreamError`."""
    try:
        result: T = _decoder(type_).decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, InvalidOptionError) as exc:
        raise JetStreamError(f"invalid JetStream API response for {type_.__name__}: {exc}") from exc
    return result


def decode_response(data: bytes, type_: type[T]) -> T:
    """Decode an API response into ``type_`` (whose Struct has an ``error`` field or not),
    raising the typed error for an error body. Decoders are cached per type."""
    try:
        err = _error_probe.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        typed = _loose_api_error(data) if isinstance(exc, msgspec.ValidationError) else None
        if typed is not None:
            raise typed from exc
        raise JetStreamError(f"invalid JetStream API response {data[:128]!r}: {exc}") from exc
    if err.error is not None:
        raise err.error.to_exception()
    return decode(data, type_)


def encode(value: Any) -> bytes:
    """Encode a request: models are normalized first (durations to nanoseconds, enums,
    aware datetimes), then encoded in field order without their unset fields."""
    if isinstance(value, _Model):
        _coerce(value, deep=True)
    return _encoder.encode(value)


# =========================================================================== message metadata
# Defined in jscore.jsmsg (which must not import this module: no cycle); listed here because
# API.md names jscore.models as the home of every model.
from .jsmsg import MsgMetadata, SequencePair  # noqa: E402

__all__ += ["MsgMetadata", "SequencePair"]

# The key-value store's models live with its rules (jscore.kv); importable from here too
# (lazily: jscore.kv imports this module).
if TYPE_CHECKING:
    from .kv import KeyValueEntry, KeyValueOp, KeyValueStatus  # noqa: F401

_KV_MODELS = ("KeyValueEntry", "KeyValueOp", "KeyValueStatus")
__all__ += list(_KV_MODELS)


def __getattr__(name: str) -> Any:
    if name in _KV_MODELS:
        from . import kv

        return getattr(kv, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# =========================================================================== object store
# The documents of the object store (layout and decisions: jscore.objstore).


class ObjectLink(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A link: to the object ``name`` of ``bucket``, or (``name`` unset) to the whole bucket."""

    bucket: str
    name: str | None = None


class ObjectMetaOptions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    link: ObjectLink | None = None
    max_chunk_size: int | None = None


class ObjectInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An object's metadata, with the stored JSON names. ``mtime`` is when the metadata was
    stored (the message's time, as nats.go reads it); ``options.link`` makes it a link."""

    name: str
    bucket: str = ""
    nuid: str = ""
    size: int = 0
    mtime: datetime | None = None
    chunks: int = 0
    digest: str | None = None
    deleted: bool = False
    description: str | None = None
    headers: dict[str, list[str]] | None = None
    metadata: dict[str, str] | None = None
    options: ObjectMetaOptions | None = None

    @property
    def is_link(self) -> bool:
        return self.options is not None and self.options.link is not None

    @property
    def link(self) -> ObjectLink | None:
        return None if self.options is None else self.options.link


class ObjectStoreStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A bucket's status, read from its stream info."""

    bucket: str
    description: str | None
    ttl: float | None
    storage: StorageType | None
    replicas: int
    sealed: bool
    size: int
    backing_store: str = "JetStream"
    metadata: dict[str, str] | None = None
    is_compressed: bool = False

    @classmethod
    def from_stream_info(cls, bucket: str, info: StreamInfo) -> ObjectStoreStatus:
        c = info.config
        return cls(
            bucket=bucket,
            description=c.description,
            ttl=float(c.max_age) if c.max_age else None,
            storage=c.storage,
            replicas=c.num_replicas or 1,
            sealed=bool(c.sealed),
            size=info.state.bytes,
            metadata=c.metadata,
            is_compressed=c.compression is not None and c.compression != Compression.NONE,
        )


__all__ += ["ObjectLink", "ObjectMetaOptions", "ObjectInfo", "ObjectStoreStatus"]
