"""``jssync object add|put|get|ls|info|rm`` against a real server."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from jssync.cli import main


def test_object_commands(nats_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = "cli" + secrets.token_hex(4)
    src = tmp_path / "in.bin"
    data = secrets.token_bytes(300_000)
    src.write_bytes(data)
    s = ["--server", nats_url]
    assert main(["object", "add", bucket, "--storage", "memory", *s]) == 0
    assert json.loads(capsys.readouterr().out)["bucket"] == bucket
    assert main(["object", "put", bucket, "--file", str(src), *s]) == 0  # named after the file
    assert "stored in.bin" in capsys.readouterr().out
    assert main(["object", "put", bucket, "other", "-f", str(src), "--chunk-size", "1000", *s]) == 0
    assert "in 300 chunks" in capsys.readouterr().out
    out = tmp_path / "out.bin"
    assert main(["object", "get", bucket, "other", "-f", str(out), *s]) == 0
    assert out.read_bytes() == data
    assert main(["object", "ls", bucket, *s]) == 0
    listed = capsys.readouterr().out
    assert "in.bin\t300000 bytes" in listed and "other\t300000 bytes" in listed
    assert main(["object", "info", bucket, "other", *s]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["size"] == 300000 and info["chunks"] == 300 and info["digest"].startswith("SHA-256=")
    assert main(["object", "rm", bucket, "other", *s]) == 0
    assert main(["object", "get", bucket, "other", "-f", str(tmp_path / "x"), *s]) == 1
    assert "ObjectNotFoundError" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["object", "put", bucket, "n", "-f", str(tmp_path / "missing"), *s]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["object", "ls", "bad.bucket", *s]) == 2
    assert "InvalidBucketNameError" in capsys.readouterr().err
    assert main(["object", "rm", bucket, *s]) == 0
    assert main(["object", "ls", bucket, *s]) == 1
    assert f"bucket {bucket} not found" in capsys.readouterr().err
