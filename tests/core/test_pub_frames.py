"""A ``PUB`` frame built from the remembered pieces (:func:`jscore.protocol.pub_head`,
:func:`size_line`, :func:`pub_tail`) is byte for byte the one ``PUB_FMT`` gives, on every path
that uses them: :meth:`Connection.submit`, :meth:`Connection.publish` and the acks'
:meth:`Connection.submit_ack` / :meth:`Connection.publish_ack`, including after the caches
were cleared by their limits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jscore import protocol
from jscore.protocol import PUB_FMT, check_publish_subject, pub_head, pub_tail, size_line, split_frames
from tests.core.test_session_settle import connected

_subjects = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Zs", "Cc", "Cs"), blacklist_characters=". *>\x85\u2028\u2029"),
            min_size=1, max_size=8),
    min_size=1, max_size=4,
).map(".".join)
_payloads = st.binary(max_size=300)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_subjects, _payloads, st.sampled_from(["submit", "publish", "submit_ack", "publish_ack"])),
                min_size=1, max_size=12))
def test_every_pub_path_writes_what_pub_fmt_gives(calls: list[tuple[str, bytes, str]]) -> None:
    conn = connected().conn
    conn.data_to_send()
    want = []
    for subject, payload, how in calls:
        if how == "submit":
            check_publish_subject(subject)  # (submit takes only a subject validated before)
            assert conn.submit(subject, payload)
        elif how == "submit_ack":
            assert conn.submit_ack(subject, payload)
        else:
            getattr(conn, how)(subject, payload)
        want.append(PUB_FMT % (subject.encode(), len(payload), payload))
    assert split_frames(conn.data_to_send()) == want


def test_the_pieces_are_remade_after_their_caches_are_cleared() -> None:
    for n in range(protocol._CACHE_LIMIT + 5):  # (each cache clears itself at its limit)
        assert size_line(n) == b"%d\r\n" % n
    for i in range(100):
        payload = b"+TERM %d" % i
        assert pub_tail(payload) == b" %d\r\n%s\r\n" % (len(payload), payload)
    assert pub_tail(b"x" * 500) == b" 500\r\n" + b"x" * 500 + b"\r\n"  # (too long to remember)
    for i in range(protocol._CACHE_LIMIT + 5):
        subject = f"s.{i}"
        check_publish_subject(subject)
        assert pub_head(subject) == b"PUB " + subject.encode() + b" "
    assert pub_head("never.checked.subject") is None
    # The caches stay bounded, and in step: a subject the check remembers has its head.
    assert len(protocol._size_lines) <= protocol._CACHE_LIMIT and len(protocol._pub_tails) <= 64
    assert protocol._pub_heads.keys() == protocol._pub_cache.keys()
    protocol._pub_heads.clear()  # (as two threads clearing at once could leave them)
    check_publish_subject("s.1")
    assert pub_head("s.1") == b"PUB s.1 "
