"""The runnable examples of docs/consumers.md ("Priority groups") run as written against a real
nats-server (only the URL is replaced), so the documentation cannot drift from the client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

DOC = Path(__file__).resolve().parents[2] / "docs" / "consumers.md"


def _examples() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Priority groups (ADR-42)") :]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize("index", range(len(_examples())))
def test_priority_group_example_runs(index: int, nats_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _examples()[index]
    assert 'URL = "nats://127.0.0.1:4222"' in code
    exec(compile(code.replace("nats://127.0.0.1:4222", nats_url), f"consumers.md example {index + 1}", "exec"), {})
    out = capsys.readouterr().out
    if "overflow worker got" in code:
        assert "overflow worker got 10 jobs" in out
    if "is now the pinned worker" in code:
        assert out.index("worker-a is now the pinned worker") < out.index("worker-b is now the pinned worker")
        assert "pinned_client_id=" in out
    if "priority=0" in code:
        assert "[b'first'] [b'second']" in out


def test_there_are_examples() -> None:
    assert len(_examples()) == 3
