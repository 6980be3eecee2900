"""The keyword fields of create/update stream and consumer: the TypedDicts that type them are
the models' fields (a test fails when one drifts from the other), a misspelled keyword is a
TypeError naming the closest field, a value of the wrong type an InvalidOptionError naming the
field, raised while the request is built (nothing is sent)."""

from __future__ import annotations

import types
import typing
from datetime import datetime
from typing import Any, Union

import msgspec
import pytest

from jscore import jsapi, models
from jscore.errors import InvalidOptionError
from jscore.models import (
    ConsumerConfig,
    ConsumerConfigFields,
    Placement,
    RetentionPolicy,
    StreamConfig,
    StreamConfigFields,
    StreamSource,
    config_from_fields,
)
from jscore.times import NatsTime


def _union(tp: Any) -> set[Any]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return set(typing.get_args(tp))
    return {tp}


def _keyword_type(tp: Any) -> set[Any]:
    """What a keyword takes for a model field of type ``tp``: durations as float seconds,
    timestamps as datetimes, an enum also as its wire string."""
    out: set[Any] = set()
    for t in _union(tp):
        if t is models.Duration:
            out.add(float)
        elif t is NatsTime:
            out.add(datetime)
        elif typing.get_origin(t) is list and typing.get_args(t) == (models.Duration,):
            out.add(list[float])
        else:
            out.add(t)
            if isinstance(t, type) and issubclass(t, models._WireEnum):
                out.add(str)
    return out


@pytest.mark.parametrize(("model", "fields"), [(StreamConfig, StreamConfigFields), (ConsumerConfig, ConsumerConfigFields)])
def test_the_keyword_fields_are_the_model_fields(model: type[msgspec.Struct], fields: type) -> None:
    model_hints = typing.get_type_hints(model)
    keyword_hints = typing.get_type_hints(fields)
    assert list(keyword_hints) == list(model.__struct_fields__)  # the same names, in the same order
    for name in model.__struct_fields__:
        assert _union(keyword_hints[name]) == _keyword_type(model_hints[name]), name
    assert not fields.__required_keys__  # (a config object may carry the required ones)


@pytest.mark.parametrize(
    ("given", "closest"),
    [({"max_msg": 1}, "max_msgs"), ({"nmae": "S"}, "name"), ({"subject": ["a"]}, "subjects"), ({"zzz": 1}, None)],
)
def test_a_misspelled_field_is_a_type_error_naming_the_closest(given: dict[str, Any], closest: str | None) -> None:
    key = next(iter(given))
    for config in (None, StreamConfig(name="S")):
        with pytest.raises(TypeError, match=f"^create_stream\\(\\) got an unexpected keyword argument '{key}'") as info:
            config_from_fields(StreamConfig, config, {"name": "S", **given}, "create_stream")
        assert (f"did you mean {closest!r}" in str(info.value)) == (closest is not None)


def test_keywords_override_the_config_object() -> None:
    cfg = config_from_fields(StreamConfig, StreamConfig(name="S", max_msgs=5), {"max_msgs": 7}, "update_stream")
    assert cfg.name == "S" and cfg.max_msgs == 7
    with pytest.raises(InvalidOptionError, match="StreamConfig.name is required"):
        config_from_fields(StreamConfig, None, {"max_msgs": 7}, "create_stream")
    with pytest.raises(InvalidOptionError, match="config must be a StreamConfig"):
        config_from_fields(StreamConfig, ConsumerConfig(), {}, "create_stream")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"max_msgs": "10"}, "StreamConfig.max_msgs"),
        ({"max_msgs": 1.5}, "StreamConfig.max_msgs"),
        ({"max_msgs": True}, "StreamConfig.max_msgs"),
        ({"subjects": "orders.>"}, "StreamConfig.subjects"),  # a str, not a list of them
        ({"subjects": [1]}, r"StreamConfig.subjects\[0\]"),
        ({"allow_direct": "yes"}, "StreamConfig.allow_direct"),
        ({"metadata": {"a": 1}}, r"StreamConfig.metadata\[\.\.\.\]"),
        ({"max_msgs": object()}, "StreamConfig.max_msgs"),
        ({"max_age": "1h"}, "StreamConfig.max_age"),
        ({"retention": "work_queue"}, "StreamConfig.retention"),
        ({"storage": 1}, "StreamConfig.storage"),
        ({"placement": Placement(tags="x")}, "StreamConfig.placement.tags"),  # type: ignore[arg-type]
        ({"sources": [StreamSource(name=3)]}, r"StreamConfig.sources\[0\].name"),  # type: ignore[arg-type]
    ],
)
def test_a_stream_field_of_the_wrong_type_is_named(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"^{where}[ :]"):
        jsapi.stream_config_request(config_from_fields(StreamConfig, None, {"name": "S", **fields}, "create_stream"))


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"max_ack_pending": "5"}, "ConsumerConfig.max_ack_pending"),
        ({"filter_subjects": "a.b"}, "ConsumerConfig.filter_subjects"),
        ({"backoff": [1, "2"]}, "ConsumerConfig.backoff"),
        ({"ack_policy": "explicitly"}, "ConsumerConfig.ack_policy"),
        ({"opt_start_time": "2024-01-01"}, "ConsumerConfig.opt_start_time"),
        ({"headers_only": 1}, "ConsumerConfig.headers_only"),
    ],
)
def test_a_consumer_field_of_the_wrong_type_is_named(fields: dict[str, Any], where: str) -> None:
    subjects = jsapi.ApiSubjects(jsapi.DEFAULT_API_PREFIX)
    with pytest.raises(InvalidOptionError, match=f"^{where}[ :]"):
        cfg = config_from_fields(ConsumerConfig, None, {"durable_name": "C", **fields}, "create_consumer")
        jsapi.consumer_create_request(subjects, "S", cfg, jsapi.ACTION_CREATE)


def test_good_values_still_encode_as_before() -> None:
    cfg = config_from_fields(
        StreamConfig, None, {"name": "S", "subjects": ["a.>"], "retention": "workqueue", "max_age": 2}, "create_stream"
    )
    assert cfg.retention is RetentionPolicy.WORKQUEUE
    assert jsapi.stream_config_request(cfg) == b'{"name":"S","subjects":["a.>"],"retention":"workqueue","max_age":2000000000}'


def test_a_value_a_newer_server_sent_still_goes_back() -> None:
    """An enum value this client does not know, decoded from the server, is sent back as it came
    (update_stream of a fetched config); only a string from the caller must be a known one."""
    cfg = models.decode(b'{"name":"S","retention":"future_policy"}', StreamConfig)
    assert jsapi.stream_config_request(cfg) == b'{"name":"S","retention":"future_policy"}'
