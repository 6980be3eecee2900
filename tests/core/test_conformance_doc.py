"""docs/conformance.md is generated from jscore.status.STATUS_TABLE (every family: pull, direct
get, publish replies, requests) and must not be stale."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from jscore.status import STATUS_TABLE, Family, family_rules

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gen_conformance.py"
DOC = ROOT / "docs" / "conformance.md"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_conformance", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_conformance_doc_is_up_to_date() -> None:
    tool = load_tool()
    assert tool.main(["--check"]) == 0, "docs/conformance.md is stale: run `python tools/gen_conformance.py`"


def test_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    tool = load_tool()
    stale = tmp_path / "conformance.md"
    stale.write_text(DOC.read_text(encoding="utf-8").replace("Consumer Deleted", "Consumer Gone"), encoding="utf-8")
    assert tool.main(["--check", "--output", str(stale)]) == 1
    assert tool.main(["--check", "--output", str(tmp_path / "missing.md")]) == 1
    assert tool.main(["--output", str(stale)]) == 0
    assert tool.main(["--check", "--output", str(stale)]) == 0


def _rows(section: str) -> list[str]:
    """The rows of the section's status table (the first table after that heading)."""
    lines = section[section.index("### The status table") :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start + 2 : end]  # (after the header and rule lines)


SECTIONS = {
    Family.PULL: "## Pull consumers (ADR-37)",
    Family.DIRECT_GET: "## Direct get (ADR-31)",
    Family.PUBLISH: "## Publish replies",
}


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def test_every_row_is_in_the_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    checked = 0
    for family, heading in SECTIONS.items():
        rows = _rows(_section(text, heading))
        table = family_rules(family)
        assert len(rows) == len(table), family
        for rule, row in zip(table, rows):
            assert rule.note.replace("|", "\\|") in row
            if rule.description_prefix:
                assert f"`{rule.description_prefix}`" in row
        checked += len(table)
    requests = _rows(_section(text, "## Requests"))
    table = family_rules(Family.REQUEST) + family_rules(Family.API_REQUEST)
    assert len(requests) == len(table)
    for rule, row in zip(table, requests):
        assert rule.note.replace("|", "\\|") in row
    checked += len(table)
    assert checked == len(STATUS_TABLE)


def test_command_line_check() -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
