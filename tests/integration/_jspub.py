"""Raw JetStream API helpers for the publishing tests.

They speak ``$JS.API.*`` directly through ``nc.request`` so that the publish tests do not depend
on the stream-management code (written at the same time); they also double as an independent
check of what the server stored.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from jscore.models import StreamInfo
from jssync.client import Client


def unique(prefix: str = "PUB") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def api(nc: Client, subject: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    reply: dict[str, Any] = json.loads(nc.request(subject, payload, timeout=timeout).data)
    return reply


_DURATIONS = frozenset({"duplicate_window", "max_age", "subject_delete_marker_ttl"})


def create_stream(nc: Client, name: str, **config: Any) -> StreamInfo:
    """Create a stream through ``js.create_stream`` (file storage, one replica unless said
    otherwise). Durations are given in nanoseconds, as on the wire, and converted."""
    fields = {"storage": "file", "num_replicas": 1, **config}
    for key in _DURATIONS & fields.keys():
        fields[key] = fields[key] / 1e9
    stream = nc.jetstream().create_stream(name=name, **fields)
    info = stream.cached_info
    assert info is not None
    return info


def delete_stream(nc: Client, name: str) -> None:
    api(nc, f"$JS.API.STREAM.DELETE.{name}")


def stream_state(nc: Client, name: str) -> dict[str, Any]:
    reply = api(nc, f"$JS.API.STREAM.INFO.{name}")
    assert "error" not in reply, reply
    state: dict[str, Any] = reply["state"]
    return state


def purge(nc: Client, name: str) -> None:
    reply = api(nc, f"$JS.API.STREAM.PURGE.{name}")
    assert reply.get("success"), reply


def delete_msg(nc: Client, name: str, seq: int) -> dict[str, Any]:
    return api(nc, f"$JS.API.STREAM.MSG.DELETE.{name}", {"seq": seq})


def get_msg(nc: Client, name: str, seq: int) -> dict[str, Any] | None:
    """The stored message at ``seq`` (subject, seq, data bytes, headers dict) or None."""
    reply = api(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
    if "error" in reply:
        return None
    m = reply["message"]
    headers: dict[str, str] = {}
    if m.get("hdrs"):
        block = base64.b64decode(m["hdrs"]).decode()
        for line in block.split("\r\n")[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip()] = v.strip()
    return {
        "subject": m["subject"],
        "seq": m["seq"],
        "data": base64.b64decode(m["data"]) if m.get("data") else b"",
        "headers": headers,
    }


def stored(nc: Client, name: str) -> Iterator[dict[str, Any]]:
    """Every message of the stream, in sequence order."""
    state = stream_state(nc, name)
    if not state["messages"]:
        return
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        m = get_msg(nc, name, seq)
        if m is not None:
            yield m


def wait_until(cond: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return cond()


class PublishCounter:
    """Counts the messages a client hands to its connection for subjects starting with
    ``prefix`` (publishes, requests, re-sends: every attempt), by wrapping the connection
    machine's frame builder on the instance."""

    def __init__(self, nc: Client, prefix: str) -> None:
        self.conn = nc._conn
        self.prefix = prefix
        self.count = 0
        checked = self.conn._publish_checked
        fast = self.conn.publish_frame
        wanted = prefix.encode()

        def counting(subject: str, *args: Any, **kwargs: Any) -> Any:
            if subject.startswith(prefix):
                self.count += 1
            return checked(subject, *args, **kwargs)

        def counting_frame(frame: bytes, size: int) -> bool:
            queued = fast(frame, size)
            if queued and frame.split(b" ", 2)[1].startswith(wanted):
                self.count += 1
            return queued

        self.conn._publish_checked = counting  # type: ignore[method-assign]
        self.conn.publish_frame = counting_frame  # type: ignore[method-assign]

    def close(self) -> None:
        del self.conn._publish_checked
        del self.conn.publish_frame

    def __enter__(self) -> PublishCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_pub_ack_frame(frame: bytes) -> bool:
    """A server->client MSG frame carrying a PubAck (or a publish error body): its payload
    starts with ``{"stream":`` or ``{"error":`` (API responses start with ``{"type":``)."""
    if not frame.startswith(b"MSG "):
        return False
    payload = frame[frame.index(b"\r\n") + 2 :]
    return payload.startswith((b'{"stream":', b'{"error":'))
