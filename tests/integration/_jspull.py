"""Helpers shared by the pull-consumer integration tests (fetch, next, consume, messages).

* ``PullEnv``: a client, its JetStream context and a fresh stream (memory unless told), with a
  second "monitor" client that sees what the client under test sends (core subscriptions on the
  JetStream subjects receive the pull requests and acks like any other subscriber would).
* ``WireCounter``: timestamps and bodies of every message on a subject seen by the monitor
  (pull requests on ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``, acks on ``$JS.ACK...``).
* ``Recorder``: a thread-safe handler for consume that records every call.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import jssync
from jscore.errors import JetStreamError, NatsError
from jscore.models import StorageType
from jssync import Client
from tests.integration import await_interest, wait_until

__all__ = ["PullEnv", "WireCounter", "Recorder", "Site", "site_env", "unique", "seqs_of", "wait_until"]


def unique(prefix: str = "P") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class WireCounter:
    """Every message on ``subject`` as the monitor client sees it: ``(monotonic time, data)``."""

    def __init__(self, mon: Client, subject: str, *, seen_from: tuple[Client, ...] = ()) -> None:
        self._lock = threading.Lock()
        self.items: list[tuple[float, bytes]] = []
        self.sub = mon.subscribe(subject, callback=self._on_msg)
        mon.flush(timeout=2.0)
        if seen_from:
            await_interest(mon, seen_from)

    def _on_msg(self, msg: jssync.Msg) -> None:
        with self._lock:
            self.items.append((time.monotonic(), msg.data))

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.items)

    def since(self, t: float) -> list[bytes]:
        with self._lock:
            return [d for (ts, d) in self.items if ts >= t]

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(d) for (_, d) in self.items if d.startswith(b"{")]

    def times(self) -> list[float]:
        with self._lock:
            return [ts for (ts, _) in self.items]


class Recorder:
    """A consume handler recording ``(time, msg)`` for every call; optional ack."""

    def __init__(self, *, ack: bool = True) -> None:
        self._cond = threading.Condition()
        self.calls: list[tuple[float, Any]] = []
        self.ack = ack

    def __call__(self, msg: Any) -> None:
        if self.ack:
            msg.ack()
        with self._cond:
            self.calls.append((time.monotonic(), msg))
            self._cond.notify_all()

    @property
    def count(self) -> int:
        with self._cond:
            return len(self.calls)

    def msgs(self) -> list[Any]:
        with self._cond:
            return [m for (_, m) in self.calls]

    def data(self) -> list[bytes]:
        return [m.data for m in self.msgs()]

    def wait_count(self, n: int, timeout: float = 5.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.calls) >= n, timeout):
                raise AssertionError(f"handler got {len(self.calls)} of {n} messages within {timeout}s")


def seqs_of(msgs: list[Any]) -> list[int]:
    return [m.metadata.sequence.stream for m in msgs]


class PullEnv:
    """A stream ``name`` with subjects ``<prefix>.>``, the client under test and a monitor."""

    def __init__(self, nc: Client, mon: Client, *, storage: StorageType = StorageType.MEMORY, **stream: Any) -> None:
        self.nc = nc
        self.mon = mon
        self.js = nc.jetstream()
        self.name = unique("P")
        self.prefix = self.name.lower()
        self.stream = self.js.create_stream(name=self.name, subjects=[f"{self.prefix}.>"], storage=storage, **stream)

    def subject(self, tail: str = "a") -> str:
        return f"{self.prefix}.{tail}"

    def publish(self, n: int, *, start: int = 0, size: int = 0, tail: str = "a") -> list[bytes]:
        out = []
        js = self.js
        for i in range(start, start + n):
            body = f"m{i}".encode()
            if size:
                body = body + b"." * (size - len(body))
            js.publish(self.subject(tail), body)
            out.append(body)
        return out

    def consumer(self, name: str | None = None, **config: Any) -> Any:
        config.setdefault("ack_wait", 30.0)
        if name is None:
            return self.js.create_consumer(self.name, **config)
        return self.js.create_consumer(self.name, durable_name=name, **config)

    def pulls(self, consumer: str, *, seen_from: tuple[Client, ...] = ()) -> WireCounter:
        """Pull requests for ``consumer``; ``seen_from``: clients on other nodes whose pulls
        must be counted from the first one."""
        return WireCounter(self.mon, f"$JS.API.CONSUMER.MSG.NEXT.{self.name}.{consumer}", seen_from=seen_from)

    def acks(self) -> WireCounter:
        return WireCounter(self.mon, f"$JS.ACK.{self.name}.>")

    def cleanup(self) -> None:
        try:
            self.js.delete_stream(self.name)
        except (JetStreamError, NatsError, TimeoutError):
            pass


class Site:
    """Where a test runs: the single server (R1 stream) or the 3-node cluster (R3 stream; give
    competing clients different nodes with ``url(i)``)."""

    def __init__(self, urls: list[str], replicas: int) -> None:
        self.urls = urls
        self.replicas = replicas

    def url(self, i: int = 0) -> str:
        return self.urls[i % len(self.urls)]

    def __repr__(self) -> str:
        return f"<Site R{self.replicas} {self.urls}>"


def site_env(site: Site, clients: Any) -> PullEnv:
    """A :class:`PullEnv` on ``site`` (retried while a fresh cluster elects its meta leader)."""
    for attempt in range(40):
        try:
            return PullEnv(clients(site.url(2)), clients(site.url(2)), num_replicas=site.replicas)
        except NatsError:
            if attempt == 39:
                raise
            time.sleep(0.25)
    raise AssertionError("unreachable")
