"""docs/conformance.md is generated from jscore.pull.STATUS_TABLE and
jscore.directget.DIRECT_GET_STATUS_TABLE and must not be stale."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from jscore.directget import DIRECT_GET_STATUS_TABLE
from jscore.pull import STATUS_TABLE

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
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Code")]


def test_every_row_is_in_the_doc() -> None:
    pull_part, direct_part = DOC.read_text(encoding="utf-8").split("## Direct get (ADR-31)", 1)
    for table, rows in ((STATUS_TABLE, _rows(pull_part)), (DIRECT_GET_STATUS_TABLE, _rows(direct_part))):
        assert len(rows) == len(table)
        for rule, row in zip(table, rows):
            assert rule.note.replace("|", "\\|") in row
            if rule.description_prefix:
                assert f"`{rule.description_prefix}`" in row


def test_command_line_check() -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
