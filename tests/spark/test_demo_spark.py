"""`jssync demo spark` on the test session's Spark and the real server."""

from __future__ import annotations

from typing import Any

import pytest

from jssync.cli import demo_spark


@pytest.mark.timeout(240)
def test_spark_demo_writes_once_and_reads_back(spark: Any, nats_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_spark(nats_url, rows=3000) == 0
    out = capsys.readouterr().out
    assert "second (a re-run of the same job) write of 3,000 rows: the stream holds 3,000" in out
    assert "3,000 rows, sequences 1..3000" in out
    assert "FAILED" not in out and out.rstrip().endswith("spark demo passed")
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped
