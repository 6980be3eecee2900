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
