"""`jssync demo` against a real nats-server: every check it prints passes."""

from __future__ import annotations

import pytest

from jssync.cli import main
from jssync.server import NatsServer

pytestmark = pytest.mark.timeout(120)


def test_demo_passes_against_a_server_twice(nats_server: NatsServer, capsys: pytest.CaptureFixture[str]) -> None:
    # Twice: the second run must cope with what the first left on the same server.
    for _ in range(2):
        assert main(["demo", "--server", nats_server.url]) == 0
        out = capsys.readouterr().out
        assert "FAILED" not in out
        assert "duplicate=True" in out
        assert "MaxMsgsPerSubjectError (err_code 10077)" in out
        assert "stream state: messages=101" in out
        assert "consume delivered the remaining 51 messages once, in order" in out
        assert "[ok] only the pinned worker receives" in out
        assert "[ok] the standby took over after priority_timeout, every job handled once" in out
        assert "get_many read both keys from one snapshot" in out
        assert out.rstrip().endswith("demo passed")


def test_stream_and_consumer_commands(nats_server: NatsServer, capsys: pytest.CaptureFixture[str]) -> None:
    url = nats_server.url
    assert main(["stream", "add", "CLI_S", "--subjects", "cli.a,cli.b", "--storage", "memory", "--server", url]) == 0
    assert '"subjects": [\n    "cli.a",\n    "cli.b"\n  ]' in capsys.readouterr().out
    assert main(["pub", "cli.a", "x", "--count", "3", "--server", url]) == 0
    capsys.readouterr()
    assert main(["--server", url, "stream", "ls"]) == 0
    assert "CLI_S\tsubjects=cli.a,cli.b\tmessages=3" in capsys.readouterr().out
    assert main(["consumer", "add", "CLI_S", "C1", "--filter", "cli.a", "--server", url]) == 0
    assert '"durable_name": "C1"' in capsys.readouterr().out
    assert main(["consumer", "ls", "CLI_S", "--server", url]) == 0
    assert "C1\tpending=3" in capsys.readouterr().out
    assert main(["consumer", "info", "CLI_S", "C1", "--server", url]) == 0
    assert '"filter_subject": "cli.a"' in capsys.readouterr().out
    assert main(["consumer", "rm", "CLI_S", "C1", "--server", url]) == 0
    assert main(["stream", "purge", "CLI_S", "--server", url]) == 0
    assert "purged 3 messages" in capsys.readouterr().out
    assert main(["stream", "rm", "CLI_S", "--server", url]) == 0
    # typed errors become one line naming what is missing and exit status 1, not a traceback;
    # a wrong command line is status 2
    assert main(["stream", "info", "CLI_S", "--server", url]) == 1
    assert capsys.readouterr().err == "jssync stream info: stream CLI_S not found\n"
    assert main(["stream", "info", "--server", url]) == 2


def test_kv_commands(nats_server: NatsServer, capsys: pytest.CaptureFixture[str]) -> None:
    url = nats_server.url
    assert main(["kv", "add", "CLIKV", "--history", "3", "--server", url]) == 0
    out = capsys.readouterr().out
    assert '"name": "KV_CLIKV"' in out and '"max_msgs_per_subject": 3' in out
    assert main(["kv", "put", "CLIKV", "a.b", "one", "--server", url]) == 0
    assert capsys.readouterr().out.strip() == "1"
    assert main(["kv", "put", "CLIKV", "a.b", "two", "--server", url]) == 0
    assert main(["kv", "put", "CLIKV", "c", "three", "--server", url]) == 0
    capsys.readouterr()
    assert main(["kv", "get", "CLIKV", "a.b", "--server", url]) == 0
    assert capsys.readouterr().out.startswith("a.b\trevision=2\top=PUT\t")
    assert main(["kv", "get", "CLIKV", "a.b", "--revision", "1", "--server", url]) == 0
    assert capsys.readouterr().out.rstrip().endswith("\tone")
    assert main(["kv", "history", "CLIKV", "a.b", "--server", url]) == 0
    assert [line.rsplit("\t", 1)[1] for line in capsys.readouterr().out.splitlines()] == ["one", "two"]
    assert main(["kv", "del", "CLIKV", "c", "--server", url]) == 0
    assert main(["kv", "purge", "CLIKV", "a.b", "--server", url]) == 0
    capsys.readouterr()
    assert main(["kv", "get", "CLIKV", "c", "--server", url]) == 1
    assert "KeyDeletedError" in capsys.readouterr().err
    assert main(["kv", "put", "CLIKV", "d", "four", "--server", url]) == 0
    capsys.readouterr()
    assert main(["kv", "keys", "CLIKV", "--server", url]) == 0
    assert capsys.readouterr().out.split() == ["d"]
    assert main(["kv", "watch", "CLIKV", "--count", "3", "--timeout", "5", "--server", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] + " " + line.split("\t")[2] for line in lines] == [
        "c op=DEL", "a.b op=PURGE", "d op=PUT"]
    assert main(["kv", "ls", "--server", url]) == 0
    assert "CLIKV\tvalues=" in capsys.readouterr().out
    assert main(["kv", "rm", "CLIKV", "--server", url]) == 0
    assert main(["kv", "get", "CLIKV", "d", "--server", url]) == 1
    assert "bucket CLIKV not found" in capsys.readouterr().err
    assert main(["kv", "put", "X", "bad key", "v", "--server", url]) == 2
    assert "InvalidKeyError" in capsys.readouterr().err
