"""The object store's pure parts: names, layout, documents, digests, the reader's decisions."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from datetime import datetime, timezone

import pytest

from jscore import objstore as O
from jscore.errors import (
    BadObjectMetaError,
    ChunkOrderError,
    DigestMismatchError,
    InvalidBucketNameError,
    InvalidObjectNameError,
    InvalidOptionError,
)
from jscore.models import DiscardPolicy, StorageType


@pytest.mark.parametrize("bucket", ["", "a.b", "a b", "a*", ">", "ä", None, 3])
def test_bad_bucket(bucket: object) -> None:
    with pytest.raises(InvalidBucketNameError):
        O.check_bucket(bucket)


@pytest.mark.parametrize("name", ["", None, b"x"])
def test_bad_object_name(name: object) -> None:
    with pytest.raises(InvalidObjectNameError):
        O.check_object_name(name)


def test_layout() -> None:
    assert O.stream_name("b") == "OBJ_b"
    assert O.chunk_subject("b", "N") == "$O.b.C.N"
    # base64url with padding, as nats.go and nats-py encode the name
    assert O.meta_subject("b", "a/b c.txt") == "$O.b.M." + base64.urlsafe_b64encode(b"a/b c.txt").decode()
    assert O.meta_subject("b", "x") == "$O.b.M.eA=="
    cfg = O.bucket_config("b", ttl=60.0, storage="memory", replicas=1)
    assert cfg.name == "OBJ_b"
    assert cfg.subjects == ["$O.b.C.>", "$O.b.M.>"]
    assert cfg.discard is DiscardPolicy.NEW and cfg.allow_rollup_hdrs and cfg.allow_direct
    assert cfg.storage is StorageType.MEMORY and cfg.max_age == 60.0 and cfg.max_bytes == -1
    with pytest.raises(InvalidOptionError):
        O.bucket_config("b", replicas=0)
    with pytest.raises(InvalidBucketNameError):
        O.bucket_config("b.c")


def test_nuid() -> None:
    a, b = O.new_nuid(random.Random(1)), O.new_nuid(random.Random(2))
    assert len(a) == 22 and a.isalnum() and a != b


def test_digest_roundtrip() -> None:
    sha = hashlib.sha256(b"hello").digest()
    s = O.digest_string(sha)
    assert s == "SHA-256=" + base64.urlsafe_b64encode(sha).decode()
    assert O.digest_bytes(s) == sha
    assert O.digest_bytes("sha-256=" + base64.urlsafe_b64encode(sha).decode().rstrip("=")) == sha
    O.check_digest(s, sha)
    with pytest.raises(DigestMismatchError):
        O.check_digest(s, hashlib.sha256(b"hellp").digest())
    for bad in ("MD5=abc", "SHA-256=!!", "SHA-256=" + base64.urlsafe_b64encode(b"short").decode(), "x"):
        with pytest.raises(DigestMismatchError):
            O.digest_bytes(bad)


def test_a_put_takes_its_chunks_stored_in_order_only() -> None:
    p = O.PutProgress(4)
    for seq in (3, 4, 9):
        p.stored(seq)
    with pytest.raises(ChunkOrderError, match="sequence 8, before the chunk published ahead of it .sequence 9"):
        p.stored(8)
    with pytest.raises(ChunkOrderError):
        p.stored(9)  # (the same sequence twice: not a chunk of its own)


def test_meta_document_go_shape() -> None:
    p = O.PutProgress(4)
    p.add(4)
    p.add(1)
    info = p.info(name="n", bucket="b", nuid="N", sha256=hashlib.sha256(b"abcde").digest(), metadata={"k": "v"})
    doc = json.loads(O.encode_meta(info))
    assert doc["name"] == "n" and doc["bucket"] == "b" and doc["nuid"] == "N"
    assert doc["size"] == 5 and doc["chunks"] == 2 and doc["mtime"] == O.ZERO_TIME
    assert doc["digest"].startswith("SHA-256=") and doc["options"] == {"max_chunk_size": 4}
    assert doc["metadata"] == {"k": "v"} and "deleted" not in doc and "description" not in doc
    when = datetime(2026, 1, 2, tzinfo=timezone.utc)
    back = O.decode_info(O.encode_meta(info), when)
    assert back == O.ObjectInfo(**{**{f: getattr(info, f) for f in info.__struct_fields__}, "mtime": when})
    gone = O.deleted_marker(info)
    doc = json.loads(O.encode_meta(gone))
    assert doc["deleted"] is True and doc["size"] == 0 and doc["chunks"] == 0 and "digest" not in doc


def test_decode_other_writers() -> None:
    # nats-py style: empty strings, single-string headers, unknown fields, link option
    raw = json.dumps({"name": "l", "bucket": "b", "nuid": "N", "size": 0, "mtime": "", "chunks": 0,
                      "digest": "", "deleted": False, "description": "", "headers": {"A": "1"},
                      "options": {"link": {"bucket": "o", "name": "x"}, "max_chunk_size": 0}, "new": 1}).encode()
    info = O.decode_info(raw)
    assert info.is_link and info.link == O.ObjectLink(bucket="o", name="x")
    assert info.headers == {"A": ["1"]} and info.digest is None and info.description is None
    for bad in (b"", b"[]", b'{"size": 1}', b'{"name": "x", "size": "big"}'):
        with pytest.raises(BadObjectMetaError):
            O.decode_info(bad)



# Found by fuzz/fuzz_objmeta.py (each input is in fuzz/corpus/objmeta/).


@pytest.mark.parametrize("nuid", [">", "*", "a.b", "a b", "a\x00", ".", "x.>"])
def test_decode_refuses_a_nuid_that_is_not_one_token(nuid: str) -> None:
    """The chunks of an object are ``$O.<bucket>.C.<nuid>``: the reader subscribes to it and a
    put or a delete purges it. A stored nuid of ``>`` made that every chunk of the bucket."""
    doc = json.dumps({"name": "o", "bucket": "b", "nuid": nuid, "size": 1, "chunks": 1}).encode()
    with pytest.raises(BadObjectMetaError, match="nuid"):
        O.decode_info(doc)


@pytest.mark.parametrize(
    "fields",
    [{"name": ""}, {"size": -1}, {"chunks": -2}, {"options": {"max_chunk_size": -1}}],
    ids=["empty-name", "negative-size", "negative-chunks", "negative-max-chunk-size"],
)
def test_decode_refuses_impossible_metadata(fields: dict[str, object]) -> None:
    doc = json.dumps({"name": "o", "bucket": "b", "nuid": "N", **fields}).encode()
    with pytest.raises(BadObjectMetaError):
        O.decode_info(doc)


def test_a_name_that_is_not_utf8_is_refused_before_anything() -> None:
    """A lone surrogate (a file name decoded with surrogateescape) raised UnicodeEncodeError
    out of meta_subject."""
    with pytest.raises(InvalidObjectNameError, match="UTF-8"):
        O.check_object_name("report-\udcff.txt")
    assert O.meta_subject("b", "report-\u00ff.txt") == "$O.b.M." + base64.urlsafe_b64encode("report-\u00ff.txt".encode()).decode()


def test_a_name_too_long_for_its_subject_is_an_invalid_name() -> None:
    """The metadata subject carries the name in base64url (4 characters per 3 bytes): a name
    whose subject is over the subject limit failed later, naming that internal subject."""
    from jscore.protocol import MAX_SUBJECT_BYTES, check_publish_subject

    longest = (MAX_SUBJECT_BYTES - len("$O.b.M.")) // 4 * 3
    check_publish_subject(O.meta_subject("b", "x" * longest))
    with pytest.raises(InvalidObjectNameError, match="too long"):
        O.meta_subject("b", "x" * (longest + 1))


def test_deeply_nested_metadata_is_bad_metadata() -> None:
    """msgspec's RecursionError escaped decode_info."""
    with pytest.raises(BadObjectMetaError):
        O.decode_info(b'{"name":"o","metadata":' + b"[" * 1000 + b"]" * 1000 + b"}")


def test_metadata_that_is_not_utf8_is_bad_metadata() -> None:
    """msgspec's UnicodeDecodeError (a string that is not UTF-8) escaped decode_info."""
    with pytest.raises(BadObjectMetaError):
        O.decode_info(b'{"name":"o\xff"}')


@pytest.mark.parametrize("tail", ["=!", "==", "= ", "!", "\n", "+"])
def test_digest_with_extra_characters_is_refused(tail: str) -> None:
    """Python's base64 decoder skips characters outside the alphabet: ``SHA-256=<43 chars>=!``
    read as a digest. Only the prefix and the base64url of 32 bytes (its ``=`` optional) are."""
    good = O.digest_string(hashlib.sha256(b"x").digest())
    with pytest.raises(DigestMismatchError):
        O.digest_bytes(good.rstrip("=") + tail)
    with pytest.raises(DigestMismatchError):
        O.digest_bytes(good.replace("SHA-256=", "SHA-256= "))
    std = "SHA-256=" + base64.b64encode(bytes([0xFB]) * 32).decode()  # the standard alphabet's + and /
    with pytest.raises(DigestMismatchError):
        O.digest_bytes(std)


def _info(data: bytes, chunk: int) -> O.ObjectInfo:
    p = O.PutProgress(chunk)
    for i in range(0, len(data), chunk):
        p.add(len(data[i:i + chunk]))
    return p.info(name="n", bucket="b", nuid="N", sha256=hashlib.sha256(data).digest())


def test_reader_ok_and_end_by_count_or_pending() -> None:
    data = bytes(range(10))
    r = O.ChunkReader(_info(data, 4))
    assert [r.accept(4, 2), r.accept(4, 1), r.accept(2, 0)] == [False, False, True]
    r.finish(hashlib.sha256(data).digest())
    r = O.ChunkReader(_info(data, 4))
    assert [r.accept(4, None), r.accept(4, None), r.accept(2, None)] == [False, False, True]
    assert O.ChunkReader(_info(b"", 4)).done


def test_reader_refuses() -> None:
    data = bytes(range(10))
    r = O.ChunkReader(_info(data, 4))
    r.accept(4, 2), r.accept(4, 1)
    with pytest.raises(DigestMismatchError):
        r.accept(4, 0)  # more bytes than the object
    r = O.ChunkReader(_info(data, 4))
    r.accept(4, 2), r.accept(4, 1)
    with pytest.raises(DigestMismatchError, match="more chunks"):  # the last one, but more are stored
        r.accept(2, 1)
    r = O.ChunkReader(_info(data, 4))
    with pytest.raises(DigestMismatchError):  # the server has nothing more: chunks missing
        r.accept(4, 0)
    r = O.ChunkReader(_info(data, 4))
    r.accept(4, 2), r.accept(4, 1), r.accept(2, 0)
    with pytest.raises(DigestMismatchError):
        r.accept(1, 0)
    with pytest.raises(DigestMismatchError):
        r.finish(hashlib.sha256(b"other").digest())


def test_chunk_size_and_window() -> None:
    for bad in (0, -1, True, 1.5, "1"):
        with pytest.raises(InvalidOptionError):
            O.check_chunk_size(bad)
    with pytest.raises(InvalidOptionError):
        O.check_chunk_size(2048, max_payload=1024)
    assert O.max_in_flight(O.DEFAULT_CHUNK_SIZE) == 32 and O.max_in_flight(1 << 30) == 2
    p = O.PutProgress(4)
    with pytest.raises(InvalidOptionError):
        p.add(5)


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.dictionaries(
    st.sampled_from(["name", "bucket", "nuid", "size", "chunks", "digest", "deleted", "headers", "options",
                     "metadata", "mtime", "description"]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                 max_leaves=6)).map(lambda d: json.dumps(d).encode())))
def test_decode_info_any_bytes(data: bytes) -> None:
    """Whatever is stored on a metadata subject: an ObjectInfo or BadObjectMetaError, nothing else."""
    try:
        info = O.decode_info(data)
    except BadObjectMetaError:
        return
    assert isinstance(info, O.ObjectInfo) and isinstance(info.name, str)


# =========================================================================== the watcher's decisions


def _meta(name: str, deleted: bool = False) -> bytes:
    return O.encode_meta(O.ObjectInfo(name=name, bucket="b", nuid="N", deleted=deleted))


def _watch(w: O.ObjectWatchState, seq: int, pending: int, data: bytes) -> list[object]:
    out = w.delivered(f"$O.b.M.{seq}", data, None, seq, T0, pending)
    return [None if i is None else (i.name, bool(i.deleted), i.mtime) for i in out]


T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_object_watch_marker_after_the_current_objects() -> None:
    from jscore.watch import WatchOptions

    w = O.ObjectWatchState(WatchOptions())
    assert w.created(2) == []
    assert _watch(w, 1, 1, _meta("a")) == [("a", False, T0)]   # the message's time is the mtime
    assert _watch(w, 2, 0, _meta("b", deleted=True)) == [("b", True, T0), None]
    assert _watch(w, 3, 0, _meta("c")) == [("c", False, T0)]   # the marker once only
    assert _watch(w, 3, 0, _meta("c")) == []                   # a repeated sequence is dropped
    empty = O.ObjectWatchState(WatchOptions())
    assert empty.created(0) == [None]                          # an empty bucket: at once
    updates = O.ObjectWatchState(WatchOptions(updates_only=True))
    assert updates.created(0) == [] and _watch(updates, 7, 0, _meta("n")) == [("n", False, T0)]


def test_object_watch_ignore_deletes_and_bad_documents_keep_the_marker() -> None:
    from jscore.watch import WatchOptions

    w = O.ObjectWatchState(WatchOptions(ignore_deletes=True))
    w.created(3)
    assert _watch(w, 1, 2, _meta("a", deleted=True)) == []
    assert w.skipped == []
    assert _watch(w, 2, 1, b"not json") == []
    assert w.skipped and w.skipped[0][0] == "$O.b.M.2" and "invalid object metadata" in w.skipped[0][1]
    assert _watch(w, 3, 0, b"{}") == [None]  # not an object description either, and it ends the initial objects
    with pytest.raises(InvalidOptionError):
        O.ObjectWatchState(WatchOptions(meta_only=True))
    with pytest.raises(InvalidOptionError):
        WatchOptions(include_history=True, updates_only=True)
    with pytest.raises(InvalidOptionError):
        WatchOptions(ignore_deletes=1)  # type: ignore[arg-type]
