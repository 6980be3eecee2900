"""The ``jssync`` commands as a user runs them (a subprocess each) against a real nats-server:
exit statuses, messages naming what is missing, empty listings, --json, the progress line, and
the infinite-deduplication walk-through (stream add, req, stream rmm, stream get)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from jssync.server import NatsServer

pytestmark = pytest.mark.timeout(240)

CLI = [sys.executable, "-m", "jssync"]


class Run:
    def __init__(self, server: NatsServer) -> None:
        self.env = {**os.environ, "NATS_URL": server.url}

    def __call__(self, *argv: str, status: int = 0) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(CLI + list(argv), capture_output=True, text=True, timeout=60, env=self.env)
        assert r.returncode == status, (argv, r.returncode, r.stdout, r.stderr)
        return r

    def json(self, *argv: str) -> object:
        return json.loads(self(*argv).stdout)


@pytest.fixture
def run(nats_server: NatsServer) -> Run:
    return Run(nats_server)


def test_help_documents_the_exit_statuses(run: Run) -> None:
    out = run("--help").stdout
    assert "exit status: 0 done; 1 the command failed" in out and "2 the command line is wrong" in out
    for command in ("req", "stream", "consumer", "kv", "object", "bench", "pub", "sub"):
        assert command in out
    stream_help = run("stream", "add", "--help").stdout
    for option in ("--max-msgs-per-subject", "--discard-new-per-subject", "--dupe-window", "--discard"):
        assert option in stream_help


def test_a_wrong_command_line_is_status_2_before_connecting(nats_server_factory: Callable[..., NatsServer]) -> None:
    # No server at all: a usage error must not even try to connect.
    run = Run.__new__(Run)
    run.env = {**os.environ, "NATS_URL": "nats://127.0.0.1:1"}
    for argv, says in [
        (["pub", "x", "--count", "-1"], "--count: -1 is not allowed"),
        (["pub", "x", "--count", "ten"], "'ten' is not a whole number"),
        (["bench", "--msgs", "0"], "--msgs: 0 is not allowed"),
        (["bench", "--requests", "-5"], "--requests: -5 is not allowed"),
        (["sub", "x", "--timeout", "0"], "--timeout: 0 is not allowed"),
        (["stream", "add", "S", "--max-msgs", "0"], "give a number >= 1, or -1 for unlimited"),
        (["stream", "add", "S", "--dupe-window", "soon"], "'soon' is not a duration"),
        (["stream", "add", "bad.name"], "stream name 'bad.name'"),
        (["stream", "add", "S", "--discard-new-per-subject"], "needs --max-msgs-per-subject"),
        (["stream", "get", "S"], "give a sequence or --last-for SUBJECT"),
        (["stream", "rmm", "S", "0"], "0 is not allowed"),
        (["consumer", "next", "S", "C", "--count", "0"], "--count: 0 is not allowed"),
        (["stream", "frobnicate"], "invalid choice: 'frobnicate'"),
        (["kv", "put", "B"], "a key is needed"),
    ]:
        r = run(*argv, status=2)
        assert says in r.stderr, (argv, r.stderr)
        assert r.stdout == ""
    # a failure to connect is the command failing: 1, in one line
    r = run("stream", "ls", status=1)
    assert r.stderr.startswith("jssync stream ls: cannot connect to nats://127.0.0.1:1") and r.stderr.count("\n") == 1


def test_not_found_names_what_is_missing(run: Run) -> None:
    assert run("stream", "info", "NOPE", status=1).stderr == "jssync stream info: stream NOPE not found\n"
    assert run("consumer", "ls", "NOPE", status=1).stderr == "jssync consumer ls: stream NOPE not found\n"
    run("stream", "add", "S1", "--subjects", "s1.>", "--storage", "memory")
    assert run("consumer", "info", "S1", "C9", status=1).stderr == \
        "jssync consumer info: consumer C9 not found in stream S1\n"
    assert run("stream", "get", "S1", "5", status=1).stderr == "jssync stream get: no message 5 in stream S1\n"
    assert run("stream", "get", "S1", "--last-for", "s1.x", status=1).stderr == \
        "jssync stream get: no message on subject s1.x in stream S1\n"
    assert run("stream", "rmm", "S1", "5", status=1).stderr == "jssync stream rmm: no message 5 in stream S1\n"
    assert run("kv", "get", "NOBUCKET", "k", status=1).stderr == "jssync kv get: bucket NOBUCKET not found\n"
    assert run("req", "nobody.home", "?", status=1).stderr == "jssync req: no responders on nobody.home\n"


def test_empty_listings_say_so_and_json_is_an_empty_list(run: Run) -> None:
    r = run("stream", "ls")
    assert (r.stdout, r.stderr) == ("", "no streams\n")
    assert run.json("stream", "ls", "--json") == []
    r = run("kv", "ls")
    assert (r.stdout, r.stderr) == ("", "no key-value buckets\n")
    assert run.json("kv", "ls", "--json") == []
    run("stream", "add", "EMPTY", "--storage", "memory")
    r = run("consumer", "ls", "EMPTY")
    assert (r.stdout, r.stderr) == ("", "no consumers in stream EMPTY\n")
    assert run.json("consumer", "ls", "EMPTY", "--json") == []


def test_json_on_every_listing_and_info(run: Run, tmp_path: os.PathLike[str]) -> None:
    run("stream", "add", "J", "--subjects", "j.*", "--storage", "memory")
    run("pub", "j.a", "hello", "--count", "3")
    streams = run.json("stream", "ls", "--json")
    assert isinstance(streams, list) and [s["config"]["name"] for s in streams] == ["J"]
    assert streams[0]["state"]["messages"] == 3
    info = run.json("stream", "info", "J", "--json")
    assert isinstance(info, dict) and info["config"]["subjects"] == ["j.*"]
    run("consumer", "add", "J", "C1")
    consumers = run.json("consumer", "ls", "J", "--json")
    assert isinstance(consumers, list) and consumers[0]["name"] == "C1" and consumers[0]["num_pending"] == 3
    cinfo = run.json("consumer", "info", "J", "C1", "--json")
    assert isinstance(cinfo, dict) and cinfo["config"]["durable_name"] == "C1"
    run("kv", "add", "JB")
    run("kv", "put", "JB", "k1", "v")
    buckets = run.json("kv", "ls", "--json")
    assert isinstance(buckets, list) and buckets[0]["bucket"] == "JB"
    assert run.json("kv", "keys", "JB", "--json") == ["k1"]
    run("object", "add", "OB")
    f = os.path.join(os.fspath(tmp_path), "o.txt")
    with open(f, "w") as fh:
        fh.write("object body")
    run("object", "put", "OB", "o.txt", "-f", f)
    objects = run.json("object", "ls", "OB", "--json")
    assert isinstance(objects, list) and objects[0]["name"] == "o.txt" and objects[0]["size"] == 11
    oinfo = run.json("object", "info", "OB", "o.txt")
    assert isinstance(oinfo, dict) and oinfo["size"] == 11


def test_the_infinite_deduplication_walk_through(run: Run) -> None:
    config = run.json("stream", "add", "dedup", "--subjects", "foo.*", "--max-msgs-per-subject", "1",
                      "--discard-new-per-subject", "--dupe-window", "10m")
    assert isinstance(config, dict)
    assert (config["discard"], config["discard_new_per_subject"], config["max_msgs_per_subject"],
            config["duplicate_window"]) == ("new", True, 1, 600.0)
    assert json.loads(run("req", "foo.1", "one").stdout) == {"stream": "dedup", "seq": 1}
    assert json.loads(run("req", "foo.2", "one").stdout) == {"stream": "dedup", "seq": 2}
    refused = json.loads(run("req", "foo.1", "two").stdout)  # the stream's answer is the reply
    assert refused["error"]["err_code"] == 10077
    assert run("stream", "rmm", "dedup", "2").stdout == "deleted message 2 from stream dedup\n"
    assert json.loads(run("req", "foo.2", "two").stdout) == {"stream": "dedup", "seq": 3}
    r = run("stream", "get", "dedup", "--last-for", "foo.2")
    assert r.stdout.startswith("[3] foo.2 ") and r.stdout.endswith("\n\ntwo\n")
    got = run.json("stream", "get", "dedup", "1", "--json")
    assert isinstance(got, dict) and (got["subject"], got["seq"], got["data"]) == ("foo.1", 1, "b25l")  # base64


def test_consumer_next_acks_unless_told_not_to(run: Run) -> None:
    run("stream", "add", "N", "--subjects", "n.>", "--storage", "memory")
    run("pub", "n.a", "payload", "--count", "3", "-H", "Trace:abc")
    run("consumer", "add", "N", "W")
    r = run("consumer", "next", "N", "W", "--count", "2")
    assert r.stdout.count("payload") == 2 and "Trace: abc" in r.stdout and "[1] n.a" in r.stdout
    info = run.json("consumer", "info", "N", "W")
    assert isinstance(info, dict) and info.get("num_ack_pending", 0) == 0 and info["num_pending"] == 1
    run("consumer", "next", "N", "W", "--no-ack")
    info = run.json("consumer", "info", "N", "W")
    assert isinstance(info, dict) and info["num_ack_pending"] == 1 and info.get("num_pending", 0) == 0
    r = run("consumer", "next", "N", "W", "--timeout", "0.5", status=1)
    assert r.stderr == "jssync consumer next: no message from consumer W of stream N within 0.5 s\n"


def test_progress_line_only_when_asked_or_on_a_terminal(run: Run) -> None:
    quiet = run("pub", "p.x", "data", "--count", "20000")
    assert quiet.stderr == "" and quiet.stdout == "published 20000 message(s) to p.x\n"
    loud = run("pub", "p.x", "data", "--count", "20000", "--progress")
    last = loud.stderr.splitlines()[-1]
    assert last.startswith("publish p.x: 20,000/20,000 ") and last.endswith("/s done"), loud.stderr
    bench = run("bench", "--msgs", "5000", "--requests", "0", "--progress")
    assert "publish: 5,000/5,000 " in bench.stderr
    assert "request/reply: skipped (--requests 0)" in bench.stdout


def test_json_info_keeps_the_fields_that_are_zero(run: Run) -> None:
    """``--json`` shows every field with a value, zeros and False included (as ``nats ...
    --json`` does): a script reads ``num_ack_pending: 0``, not a missing key."""
    run("stream", "add", "Z", "--subjects", "z.*", "--storage", "memory")
    info = run.json("stream", "info", "Z", "--json")
    assert isinstance(info, dict)
    state = info["state"]
    for field in ("messages", "bytes", "first_seq", "last_seq", "num_subjects", "num_deleted", "consumer_count"):
        assert state[field] == 0, field
    assert info["config"]["sealed"] is False and info["config"]["deny_delete"] is False
    run("consumer", "add", "Z", "ZC")
    cinfo = run.json("consumer", "info", "Z", "ZC", "--json")
    assert isinstance(cinfo, dict)
    for field in ("num_ack_pending", "num_redelivered", "num_waiting", "num_pending"):
        assert cinfo[field] == 0, field
    assert cinfo["delivered"]["stream_seq"] == 0 and cinfo["ack_floor"]["consumer_seq"] == 0
    assert cinfo["paused"] is False and cinfo["push_bound"] is False
    listed = run.json("consumer", "ls", "Z", "--json")
    assert isinstance(listed, list) and listed[0]["num_ack_pending"] == 0
