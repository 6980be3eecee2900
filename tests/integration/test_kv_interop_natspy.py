"""Key-value interop with nats-py, both ways, on one real nats-server: buckets, values,
deletes, purges, history and keys written by one are read by the other."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jscore.errors import KeyDeletedError, KeyNotFoundError
from jssync import Client, KeyValueOp
from tests.integration import clients
from tests.integration.test_interop_natspy import NatsPyPeer

__all__ = ["clients"]

nats = pytest.importorskip("nats", reason="nats-py is the interop peer")

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]


@pytest.fixture
def peer(nats_url: str) -> Iterator[NatsPyPeer]:
    p = NatsPyPeer(nats_url)
    yield p
    p.close()


def test_bucket_made_by_natspy_is_used_by_jssync(nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]) -> None:
    async def write() -> Any:
        js = peer.nc.jetstream()
        kv = await js.create_key_value(bucket="PYMADE", history=5)
        await kv.put("cfg.a", b"1")
        await kv.put("cfg.a", b"2")
        await kv.put("cfg.b", b"b")
        await kv.put("gone", b"x")
        await kv.delete("gone")
        await kv.put("purged", b"x")
        await kv.purge("purged")
        return kv

    peer.run(write(), timeout=10)
    js = clients(nats_url).jetstream()
    kv = js.key_value("PYMADE")
    assert kv.get("cfg.a").value == b"2"
    assert [e.value for e in kv.history("cfg.a")] == [b"1", b"2"]
    with pytest.raises(KeyDeletedError):
        kv.get("gone")
    with pytest.raises(KeyDeletedError):
        kv.get("purged")
    assert [e.operation for e in kv.history("purged")] == [KeyValueOp.PURGE]
    assert sorted(kv.keys()) == ["cfg.a", "cfg.b"]
    assert set(kv.get_many("cfg.>")) == {"cfg.a", "cfg.b"}
    assert kv.status().history == 5
    rev = kv.create("gone", b"back")  # after nats-py's delete marker
    assert kv.get("gone").revision == rev
    assert "PYMADE" in list(js.key_value_names())


def test_bucket_made_by_jssync_is_used_by_natspy(nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value("JSMADE", history=4, ttl=3600.0)
    r1 = kv.put("a", b"1")
    kv.update("a", b"2", last=r1)
    kv.put("b", b"b")
    kv.put("d", b"d")
    kv.delete("d")
    kv.put("p", b"p")
    kv.purge("p")

    async def read() -> dict[str, Any]:
        pjs = peer.nc.jetstream()
        pkv = await pjs.key_value("JSMADE")
        out: dict[str, Any] = {}
        out["a"] = (await pkv.get("a")).value
        out["hist"] = [e.value for e in await pkv.history("a")]
        out["keys"] = sorted(await pkv.keys())
        for k in ("d", "p", "never"):
            try:
                await pkv.get(k)
                out[k] = "found"
            except nats.js.errors.KeyNotFoundError as exc:  # (nats-py's get: the marker's op kept)
                out[k] = getattr(exc, "op", None)
        status = await pkv.status()
        out["history"] = status.history
        out["ttl"] = status.ttl
        # nats-py writes, jssync reads
        await pkv.put("from.py", b"hello")
        await pkv.delete("b")
        return out

    got = peer.run(read(), timeout=10)
    assert got["a"] == b"2" and got["hist"] == [b"1", b"2"]
    assert got["keys"] == ["a", "b"]
    assert (got["d"], got["p"], got["never"]) == ("DEL", "PURGE", None)
    assert got["history"] == 4 and got["ttl"] == 3600.0
    assert kv.get("from.py").value == b"hello"
    with pytest.raises(KeyNotFoundError):
        kv.get("b")


def test_watchers_see_each_other_s_changes(nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value("WATCHX", history=3)
    kv.put("seed", b"s")

    async def start() -> Any:
        pkv = await peer.nc.jetstream().key_value("WATCHX")
        w = await pkv.watchall()
        first = await w.updates(5)
        marker = await w.updates(5)
        return pkv, w, first, marker

    pkv, pw, first, marker = peer.run(start(), timeout=10)
    assert (first.key, first.value, marker) == ("seed", b"s", None)
    with kv.watch() as w:
        assert w.next(5.0) is not None and w.next(5.0) is None
        kv.put("a", b"from jssync")
        kv.delete("seed")

        async def changes() -> list[Any]:
            out = [await pw.updates(5), await pw.updates(5)]
            await pkv.put("b", b"from nats-py")
            await pkv.purge("a")
            await pw.stop()
            return [(e.key, e.value, e.operation) for e in out]

        assert peer.run(changes(), timeout=10) == [("a", b"from jssync", None), ("seed", b"", "DEL")]
        got = [w.next(5.0) for _ in range(4)]
    assert [(e.key, e.operation.value) for e in got if e is not None] == [
        ("a", "PUT"), ("seed", "DEL"), ("b", "PUT"), ("a", "PURGE")]
    assert got[2] is not None and got[2].value == b"from nats-py"
