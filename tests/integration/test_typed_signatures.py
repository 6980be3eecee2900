"""The public entry points spell out every option: ``help()`` and mypy show them, a misspelled
option is a ``TypeError``, a wrong type or value an ``InvalidOptionError`` naming the option,
raised before anything is sent (checked against a real server: nothing is stored)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

import jssync
from jscore.errors import InvalidOptionError
from jscore.validate import check_optional_flag
from jssync.jetstream import JetStream
from jssync.publish import Publisher
from jssync.stream import Stream

pytestmark = pytest.mark.timeout(60)

PUBLISH_OPTIONS = {"headers", "timeout", "msg_id", "expected_stream", "expected_last_seq", "expected_last_subject_seq",
                   "expected_last_subject_seq_subject", "expected_last_msg_id", "ttl"}


def _keywords(f: Any) -> set[str]:
    params = inspect.signature(f).parameters.values()
    assert not any(p.kind is p.VAR_KEYWORD for p in params), f"{f.__qualname__} still takes **kwargs"
    return {p.name for p in params if p.kind is p.KEYWORD_ONLY}


def test_the_signatures_name_every_option() -> None:
    assert _keywords(JetStream.publish) == PUBLISH_OPTIONS
    assert _keywords(JetStream.publish_async) == PUBLISH_OPTIONS | {"auto_msg_id"}
    # the same options as the publisher they hand over to (one list, no drift)
    assert _keywords(JetStream.publish) == _keywords(Publisher.publish)
    assert _keywords(JetStream.publish_async) == _keywords(Publisher.publish_async)
    assert _keywords(Stream.ordered_consumer) == _keywords(JetStream.ordered_consumer)
    assert "msg_id" in (JetStream.publish.__doc__ or "") and "ttl" in (JetStream.publish.__doc__ or "")


def test_check_optional_flag() -> None:
    assert check_optional_flag(None, "x") is None and check_optional_flag(True, "x") is True
    for bad in ("yes", 1, 0.0, []):
        with pytest.raises(InvalidOptionError, match="^x must be a bool"):
            check_optional_flag(bad, "x")


@pytest.fixture(scope="module")
def js(nats_url: str) -> Iterator[JetStream]:
    with jssync.connect(nats_url) as nc:
        js = nc.jetstream()
        js.create_stream(name="TYPED_SIG", subjects=["typed.sig"], storage="memory")
        try:
            yield js
        finally:
            js.delete_stream("TYPED_SIG")


def _stored(js: JetStream) -> int:
    return js.stream("TYPED_SIG").info().state.messages


@pytest.mark.parametrize("call", ["publish", "publish_async"])
def test_a_misspelled_option_is_a_type_error(js: JetStream, call: str) -> None:
    with pytest.raises(TypeError, match="msgid"):
        getattr(js, call)("typed.sig", b"x", msgid="a")
    assert _stored(js) == 0


@pytest.mark.parametrize(
    ("call", "option", "value"),
    [
        ("publish", "msg_id", 5),
        ("publish", "timeout", "1"),
        ("publish", "ttl", 0.5),
        ("publish", "expected_last_seq", "3"),
        ("publish", "expected_stream", ""),
        ("publish_async", "msg_id", ""),
        ("publish_async", "expected_last_msg_id", 7),
        ("publish_async", "auto_msg_id", "yes"),  # used to switch the option on
        ("publish_async", "timeout", -1),  # used to be checked only when the window was full
        ("publish_async", "timeout", "x"),
    ],
)
def test_a_wrong_value_names_the_option_and_sends_nothing(js: JetStream, call: str, option: str, value: Any) -> None:
    with pytest.raises(InvalidOptionError, match=f"^{option} "):
        getattr(js, call)("typed.sig", b"x", **{option: value})
    js.publish_async_complete(timeout=5.0)
    assert _stored(js) == 0


def test_the_ordered_consumer_of_a_stream_handle(js: JetStream) -> None:
    stream = js.stream("TYPED_SIG")
    with pytest.raises(TypeError, match="filter_subject"):
        stream.ordered_consumer(filter_subject="typed.sig")  # type: ignore[call-arg]
    with pytest.raises(InvalidOptionError, match="headers_only"):
        stream.ordered_consumer(headers_only="no")  # type: ignore[arg-type]
    oc = stream.ordered_consumer(filter_subjects="typed.sig", deliver_policy="all")
    assert oc.fetch(1, expires=0.5) == []


# ---------------------------------------------------------------------------- stream and consumer configs

from jscore.models import ConsumerConfig, ConsumerConfigFields, StreamConfig, StreamConfigFields  # noqa: E402

CONFIG_CALLS = [
    (JetStream.create_stream, StreamConfig),
    (JetStream.update_stream, StreamConfig),
    (JetStream.create_or_update_stream, StreamConfig),
    (JetStream.create_consumer, ConsumerConfig),
    (JetStream.update_consumer, ConsumerConfig),
    (JetStream.create_or_update_consumer, ConsumerConfig),
    (Stream.create_consumer, ConsumerConfig),
    (Stream.update_consumer, ConsumerConfig),
    (Stream.create_or_update_consumer, ConsumerConfig),
]


@pytest.mark.parametrize(("call", "model"), CONFIG_CALLS)
def test_help_shows_every_config_field(call: Any, model: type) -> None:
    assert _keywords(call) == {"timeout", *model.__struct_fields__}
    import pydoc

    text = pydoc.render_doc(call, renderer=pydoc.plaintext)
    for field in ("max_msgs_per_subject", "allow_msg_ttl") if model is StreamConfig else ("max_ack_pending", "backoff"):
        assert f"{field}: " in text
    fields = StreamConfigFields if model is StreamConfig else ConsumerConfigFields
    assert set(fields.__annotations__) == set(model.__struct_fields__)


class _ApiMonitor:
    """Every JetStream API request that reaches the server (a second connection's
    subscription on ``$JS.API.>``)."""

    def __init__(self, url: str) -> None:
        self.nc = jssync.connect(url)
        self.sub = self.nc.subscribe("$JS.API.>")
        self.nc.flush(timeout=5.0)

    def seen(self, js: JetStream) -> list[str]:
        js.client.flush(timeout=5.0)  # anything the call sent has reached the server ...
        self.nc.flush(timeout=5.0)  # ... and anything the server routed has reached the monitor
        out = []
        while True:
            try:
                out.append(self.sub.next_msg(timeout=0.2).subject)
            except jssync.errors.TimeoutError:
                return out


@pytest.fixture
def monitor(nats_url: str) -> Iterator[_ApiMonitor]:
    m = _ApiMonitor(nats_url)
    try:
        yield m
    finally:
        m.nc.close()


@pytest.mark.parametrize(
    ("call", "kwargs", "error", "match"),
    [
        ("create_stream", {"name": "TS2", "subject": ["ts2"]}, TypeError, "'subject' .*did you mean 'subjects'"),
        ("create_stream", {"name": "TS2", "max_msgs": "10"}, InvalidOptionError, "max_msgs"),
        ("create_stream", {"name": "TS2", "subjects": "ts2.>"}, InvalidOptionError, "subjects"),
        ("create_stream", {"name": "TS2", "retention": "work_queue"}, InvalidOptionError, "retention"),
        ("update_stream", {"name": "TYPED_SIG", "max_bytes": 1.5}, InvalidOptionError, "max_bytes"),
        ("create_or_update_stream", {"name": "TS2", "deny_delet": True}, TypeError, "did you mean 'deny_delete'"),
        ("create_consumer", {"durable_name": "C", "max_ack_pendng": 5}, TypeError, "did you mean 'max_ack_pending'"),
        ("create_consumer", {"durable_name": "C", "max_ack_pending": "5"}, InvalidOptionError, "max_ack_pending"),
        ("update_consumer", {"durable_name": "C", "filter_subjects": "typed.sig"}, InvalidOptionError, "filter_subjects"),
        ("create_or_update_consumer", {"durable_name": "C", "ack_policy": "explict"}, InvalidOptionError, "ack_policy"),
    ],
)
def test_a_bad_config_field_sends_nothing(
    js: JetStream, monitor: _ApiMonitor, call: str, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    args = () if "stream" in call else ("TYPED_SIG",)
    with pytest.raises(error, match=match):
        getattr(js, call)(*args, **kwargs)
    assert monitor.seen(js) == []
    # the same keywords through a Stream handle's consumer calls
    if "consumer" in call:
        stream = js.stream("TYPED_SIG")
        monitor.seen(js)
        with pytest.raises(error, match=match):
            getattr(stream, call)(**kwargs)
        assert monitor.seen(js) == []
    # and a good call is seen (the monitor works)
    js.stream_info("TYPED_SIG")
    assert monitor.seen(js) == ["$JS.API.STREAM.INFO.TYPED_SIG"]


# ---------------------------------------------------------------------------- headers of the wrong shape


@pytest.mark.parametrize("bad", [5, "X-A: 1", b"", 2.5])
def test_headers_of_the_wrong_shape_name_headers_and_send_nothing(js: JetStream, bad: Any) -> None:
    nc = js.client
    sub = nc.subscribe("typed.hdr")
    nc.flush(timeout=5.0)
    calls = [
        lambda: nc.publish("typed.hdr", b"x", headers=bad),
        lambda: nc.request("typed.hdr", b"x", headers=bad, timeout=1.0),
        lambda: js.publish("typed.sig", b"x", headers=bad),
        lambda: js.publish("typed.sig", b"x", headers=bad, msg_id="m1"),
        lambda: js.publish_async("typed.sig", b"x", headers=bad),
        lambda: js.publish_async("typed.sig", b"x", headers=bad, auto_msg_id=True),
    ]
    for call in calls:
        with pytest.raises(InvalidOptionError, match="^headers must be "):
            call()
    js.publish_async_complete(timeout=5.0)
    nc.flush(timeout=5.0)
    with pytest.raises(jssync.errors.TimeoutError):
        sub.next_msg(timeout=0.3)
    sub.unsubscribe()
    assert _stored(js) == 0
