"""`warden new-job`, followed as the README says: the generated tests of a python and a SQL job
pass against real Spark (in a process of its own, as a team runs them), and `warden validate` finds
the new jobs valid after Spark's analyzer has seen them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ops.cli import main
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig

REPO = Path(__file__).resolve().parents[2]


def test_new_job_writes_python_and_sql_jobs_whose_tests_pass_and_which_validate(
    platform_conf: PlatformConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = {kind: tmp_path / "team" / f"purchases-{kind}" for kind in ("python", "sql")}

    assert main(["new-job", "purchases", "--kind", "python", "--code", str(code["python"])]) == 0
    assert main(["new-job", "purchases_sql", "--kind", "sql", "--code", str(code["sql"])]) == 0

    written = capsys.readouterr().out
    assert f"wrote    {platform_conf.conf_dir / 'jobs' / 'purchases.yaml'}" in written
    assert (code["python"] / "purchases" / "logic.py").is_file()
    spec = find_job("purchases", platform_conf.conf_dir)
    assert spec.pipeline.kind == "python" and spec.operations.metrics_port >= 9410
    assert find_job("purchases_sql", platform_conf.conf_dir).pipeline.kind == "sql"
    # Both jobs' tests in one run: one JVM start for the two.
    generated = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *(str(d / "tests") for d in code.values()),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert generated.returncode == 0, generated.stdout[-3000:] + generated.stderr[-3000:]
    assert "2 passed" in generated.stdout

    assert main(["validate"]) == 0
    validated = capsys.readouterr().out
    assert "ok       purchases (python, config" in validated
    assert "ok       purchases_sql (sql, config" in validated


def test_new_job_writes_a_sql_job_and_overwrites_nothing(
    platform_conf: PlatformConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "sql-team"
    assert main(["new-job", "purchases_sql", "--kind", "sql", "--code", str(code)]) == 0
    job_text = (platform_conf.conf_dir / "jobs" / "purchases_sql.yaml").read_text()
    capsys.readouterr()

    assert main(["new-job", "purchases_sql", "--kind", "python", "--code", str(code)]) == 2

    assert "exist already" in capsys.readouterr().err
    assert (platform_conf.conf_dir / "jobs" / "purchases_sql.yaml").read_text() == job_text
    assert not (code / "purchases_sql").exists()
    assert find_job("purchases_sql", platform_conf.conf_dir).pipeline.kind == "sql"
