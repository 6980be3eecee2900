"""Object store interop both ways with nats-py: buckets, objects, metadata, links and deletes
written by one client are read by the other (the layout nats.go and the nats CLI share)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jscore import objstore as O
from jscore.errors import ObjectNotFoundError
from jssync import Client
from tests.integration import clients  # noqa: F401 - fixture
from tests.integration.test_interop_natspy import NatsPyPeer

nats = pytest.importorskip("nats", reason="nats-py is the interop peer")
from nats.js import api  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.fixture
def peer(nats_url: str) -> Iterator[NatsPyPeer]:
    p = NatsPyPeer(nats_url)
    yield p
    p.close()


def _bucket() -> str:
    return "io" + secrets.token_hex(6)


def test_jssync_writes_natspy_reads(nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]) -> None:  # noqa: F811
    js = clients(nats_url).jetstream()
    bucket = _bucket()
    obs = js.create_object_store(bucket, description="from jssync")
    try:
        big = secrets.token_bytes(700_000)  # 6 chunks of 128 KiB
        obs.put("dir/big.bin", big, description="big one", headers={"X-K": "v"}, metadata={"m": "1"})
        obs.put("small", b"hello")
        obs.put("gone", b"bye")
        obs.delete("gone")
        obs.add_link("ln", "small")
        pjs: Any = peer.nc.jetstream()
        pobs = peer.run(pjs.object_store(bucket))
        res = peer.run(pobs.get("dir/big.bin"), timeout=30)
        assert res.data == big
        assert res.info.size == len(big) and res.info.chunks == 6 and res.info.description == "big one"
        assert res.info.digest == O.digest_string(hashlib.sha256(big).digest())
        assert peer.run(pobs.get("small")).data == b"hello"
        assert peer.run(pobs.get("ln")).data == b"hello"  # nats-py follows our link
        names = sorted(i.name for i in peer.run(pobs.list(ignore_deletes=True)))
        assert names == ["dir/big.bin", "ln", "small"]
        with pytest.raises(Exception):
            peer.run(pobs.get("gone"))
        st = peer.run(pobs.status())
        assert st.bucket == bucket and st.description == "from jssync"
    finally:
        js.delete_object_store(bucket)


def test_natspy_writes_jssync_reads(nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]) -> None:  # noqa: F811
    js = clients(nats_url).jetstream()
    bucket = _bucket()
    pjs: Any = peer.nc.jetstream()
    pobs = peer.run(pjs.create_object_store(bucket, config=api.ObjectStoreConfig(description="from nats-py")))
    big = secrets.token_bytes(1_000_003)
    peer.run(pobs.put("data/big", big), timeout=30)
    peer.run(pobs.put("small", b"hi", meta=api.ObjectMeta(name="small", description="desc")))
    peer.run(pobs.put("gone", b"x"))
    peer.run(pobs.delete("gone"))
    obs = js.object_store(bucket)
    try:
        info = obs.info("data/big")
        assert info.size == len(big) and info.digest == O.digest_string(hashlib.sha256(big).digest())
        assert obs.get_bytes("data/big") == big
        assert obs.get_bytes("small") == b"hi" and obs.info("small").description == "desc"
        with pytest.raises(ObjectNotFoundError):
            obs.get("gone")
        assert sorted(i.name for i in obs.list()) == ["data/big", "small"]
        assert obs.status().description == "from nats-py"
        assert bucket in set(js.object_store_names())
        # and back: our change of a nats-py object is read by nats-py
        obs.put("small", b"replaced by jssync")
        assert peer.run(pobs.get("small")).data == b"replaced by jssync"
    finally:
        js.delete_object_store(bucket)


def test_metadata_changes_and_watch_across_clients(
    nats_url: str, peer: NatsPyPeer, clients: Callable[..., Client]  # noqa: F811
) -> None:
    js = clients(nats_url).jetstream()
    bucket = _bucket()
    obs = js.create_object_store(bucket)
    try:
        obs.put("doc", b"content", description="v1")
        pjs: Any = peer.nc.jetstream()
        pobs = peer.run(pjs.object_store(bucket))
        peer.run(pobs.update_meta("doc", api.ObjectMeta(name="doc", description="set by nats-py")))
        assert obs.info("doc").description == "set by nats-py"
        assert obs.get_bytes("doc") == b"content"
        obs.update_meta("doc", description="set by jssync")
        pinfo = peer.run(pobs.get_info("doc"))
        assert pinfo.description == "set by jssync" and pinfo.size == 7
        with obs.watch(updates_only=True) as w:
            peer.run(pobs.put("from-py", b"x"))
            got = w.next(5.0)
            assert got is not None and got.name == "from-py" and got.size == 1
            peer.run(pobs.delete("from-py"))
            got = w.next(5.0)
            assert got is not None and got.name == "from-py" and got.deleted
    finally:
        js.delete_object_store(bucket)
