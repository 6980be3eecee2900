"""The examples of docs/objects.md run as written (only the server URL differs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

DOC = Path(__file__).resolve().parents[2] / "docs" / "objects.md"
EXAMPLE_RE = re.compile(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", re.S)
EXAMPLES = dict(EXAMPLE_RE.findall(DOC.read_text(encoding="utf-8")))


def test_every_example_is_found() -> None:
    assert set(EXAMPLES) == {"basics", "streaming", "digest", "manage", "links", "watch", "watch-callback", "seal"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example(name: str, nats_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = EXAMPLES[name].replace("nats://127.0.0.1:4222", nats_url)
    exec(compile(code, f"docs/objects.md:{name}", "exec"), {"__name__": "__doc_example__"})
    out = capsys.readouterr().out
    expected = {
        "basics": "15 1 SHA-256=",
        "streaming": "20 chunks\n5242880\n",
        "digest": "refused:",
        "manage": "['a.txt', 'b.txt']\nrenamed\n{'Content-Type': ['text/plain']}\nb.txt is gone\nTrue\n",
        "links": "b'\\x89PNG...'\nObjectLink(bucket='docs-assets'",
        "watch": "existing\nNone\nnew\nTrue\n",
        "watch-callback": "['report.pdf']\n",
        "seal": "True True JetStream\nsealed: read only\nb'%PDF-1.7'\n",
    }[name]
    assert expected in out, out
