"""The examples of docs/kv.md run as written against a real nats-server (only the URL differs),
and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from jssync.server import NatsServer

pytestmark = pytest.mark.timeout(60)

DOC = Path(__file__).resolve().parents[2] / "docs" / "kv.md"
EXAMPLE_RE = re.compile(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", re.S)
# `print(...)  # shown` with what it shows first on the comment (up to a ':' explanation)
PRINT_RE = re.compile(r"^\s*print\(.*\)\s+#\s*(.+?)(?::.*)?$")


def examples() -> dict[str, str]:
    return dict(EXAMPLE_RE.findall(DOC.read_text(encoding="utf-8")))


def test_the_page_has_its_examples() -> None:
    assert set(examples()) == {"buckets", "values", "snapshot", "watch", "purge-deletes"}


@pytest.mark.parametrize("name", sorted(examples()))
def test_example_runs_and_prints_what_it_says(name: str, nats_server: NatsServer) -> None:
    code = examples()[name].replace("nats://127.0.0.1:4222", nats_server.url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/kv.md:{name}", "exec"), {"__name__": "__doc_example__"})
    printed = out.getvalue().splitlines()
    expected = [m.group(1).strip() for line in code.splitlines() if (m := PRINT_RE.match(line))]
    shown = [p for p in printed]
    # every commented print shows its comment (in order; a comment may give the start of a line)
    it = iter(shown)
    for want in expected:
        assert any(line.startswith(want) or line == want for line in it), (want, shown)
