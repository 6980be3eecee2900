"""Interop with nats-py (asyncio) as the peer, both connected to the same real nats-server.

nats-py runs on its own event loop in a helper thread; the test thread drives it with
``run_coroutine_threadsafe(...).result(timeout)`` so every call is bounded.

nats-py exposes received headers as a ``dict`` (a repeated key keeps its last value), so the
multi-valued checks run in the direction nats-py -> jssync, where nats-py writes whatever
``headers.items()`` yields, repeated keys included.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from jscore.errors import NoRespondersError
from jssync import Client, Msg
from tests.integration import clients, collect

__all__ = ["clients"]

nats = pytest.importorskip("nats", reason="nats-py is the interop peer")

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

T = TypeVar("T")


class _Pairs:
    """A headers object for nats-py whose ``items()`` repeats a key (multi-valued headers)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def items(self) -> list[tuple[str, str]]:
        return list(self._pairs)


class NatsPyPeer:
    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self.loop.run_forever, name="nats-py-loop", daemon=True)
        self._thread.start()

        async def on_error(exc: BaseException) -> None:
            self.errors.append(exc)

        self.nc: Any = self.run(nats.connect(url, error_cb=on_error, allow_reconnect=False, connect_timeout=2))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 5.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        try:
            self.run(self.nc.close(), timeout=5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
            self.loop.close()


@pytest.fixture
def peer(nats_url: str) -> Iterator[NatsPyPeer]:
    p = NatsPyPeer(nats_url)
    yield p
    p.close()
    assert not p.errors, p.errors


def test_jssync_to_natspy_with_headers(nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    got: asyncio.Queue[Any] = peer.run(_make_queue())

    async def subscribe() -> Any:
        async def cb(msg: Any) -> None:
            await got.put(msg)

        sub = await peer.nc.subscribe("interop.a", cb=cb)
        await peer.nc.flush()
        return sub

    peer.run(subscribe())
    nc.publish("interop.a", b"plain")
    nc.publish(
        "interop.a",
        b"with headers",
        headers=[("Single", "one value"), ("Multi", "first"), ("Multi", "second"), ("Tab", "a\tb")],
    )
    nc.publish("interop.a", bytes(range(256)) * 40, reply="interop.reply")
    nc.flush(timeout=2)

    async def take(n: int) -> list[Any]:
        return [await asyncio.wait_for(got.get(), 5) for _ in range(n)]

    m1, m2, m3 = peer.run(take(3), timeout=10)
    assert (m1.subject, m1.data, m1.headers) == ("interop.a", b"plain", None)
    assert m2.data == b"with headers"
    assert m2.headers["Single"] == "one value"
    assert m2.headers["Tab"] == "a\tb"
    assert m2.headers["Multi"] in ("first", "second")  # nats-py's dict keeps one of them
    assert m3.data == bytes(range(256)) * 40 and m3.reply == "interop.reply"


def test_natspy_to_jssync_with_multi_valued_headers(
    nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]
) -> None:
    nc = clients(nats_url)
    sub = nc.subscribe("interop.b")
    nc.flush(timeout=2)
    pairs = [("Multi", "1"), ("Other", "x"), ("Multi", "2"), ("Multi", "3")]

    async def publish() -> None:
        await peer.nc.publish("interop.b", b"one")
        await peer.nc.publish("interop.b", b"two", headers=_Pairs(pairs))
        await peer.nc.publish("interop.b", b"three", headers={"Solo": "s"})
        await peer.nc.flush()

    peer.run(publish())
    m1, m2, m3 = collect(sub, 3)
    assert (m1.data, m1.headers) == (b"one", None)
    assert m2.data == b"two" and m2.headers is not None
    assert m2.headers.items() == pairs
    assert m2.headers.get_all("multi") == ["1", "2", "3"]
    assert m3.headers is not None and m3.headers.items() == [("Solo", "s")]


def test_request_reply_both_directions(nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)

    # nats-py responds, jssync requests
    async def serve() -> None:
        async def cb(msg: Any) -> None:
            if msg.headers:
                await peer.nc.publish(msg.reply, b"py:" + msg.data, headers={"Echo": msg.headers.get("Q", "")})
            else:
                await msg.respond(b"py:" + msg.data)

        await peer.nc.subscribe("interop.py.svc", cb=cb)
        await peer.nc.flush()

    peer.run(serve())
    for i in range(20):
        assert nc.request("interop.py.svc", b"%d" % i, timeout=2).data == b"py:%d" % i
    reply = nc.request("interop.py.svc", b"h", headers={"Q": "question"}, timeout=2)
    assert reply.data == b"py:h"
    assert reply.headers is not None and reply.headers["Echo"] == "question"

    # jssync responds, nats-py requests
    def respond(msg: Msg) -> None:
        values = msg.headers.get_all("Q") if msg.headers else []
        msg.respond(b"js:" + msg.data, headers=[("Echo", v) for v in values] or None)

    nc.subscribe("interop.js.svc", callback=respond)
    nc.flush(timeout=2)

    async def ask() -> list[Any]:
        out = []
        for i in range(20):
            out.append(await peer.nc.request("interop.js.svc", b"%d" % i, timeout=2))
        out.append(await peer.nc.request("interop.js.svc", b"h", timeout=2, headers=_Pairs([("Q", "a"), ("Q", "b")])))
        return out

    replies = peer.run(ask(), timeout=20)
    assert [r.data for r in replies[:20]] == [b"js:%d" % i for i in range(20)]
    assert replies[20].data == b"js:h"
    assert replies[20].headers["Echo"] in ("a", "b")

    # and a no-responders answer for the jssync side, through the same server
    with pytest.raises(NoRespondersError):
        nc.request("interop.nobody", b"", timeout=2)


async def _make_queue() -> asyncio.Queue[Any]:
    return asyncio.Queue()
