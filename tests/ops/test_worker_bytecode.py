"""Bytecode in the zips Spark's Python workers import PySpark from (`ops.driver.worker_bytecode`)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from ops.driver.worker_bytecode import compile_zip, uncompiled, worker_zips

MODULE = 'def fail():\n    raise ValueError("from the zip")\n'


def imported_from(archive: Path, statement: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter running `statement` with `archive` first on its path, as a worker."""
    return subprocess.run(
        [sys.executable, "-c", statement],
        env={**os.environ, "PYTHONPATH": str(archive)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_zip_gets_bytecode_once_and_its_modules_load_from_it_with_tracebacks_into_the_source(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "package.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("package/__init__.py", "")
        bundle.writestr("package/module.py", MODULE)
        bundle.writestr("package/tests/test_module.py", "assert True\n")
    assert uncompiled(archive) == ["package/__init__.py", "package/module.py"]

    assert compile_zip(archive) == 2
    with zipfile.ZipFile(archive) as bundle:
        names = set(bundle.namelist())
        assert bundle.read("package/module.py").decode() == MODULE
    # The package's tests are left as sources: no worker imports them.
    assert {"package/__init__.pyc", "package/module.pyc"} <= names
    assert "package/tests/test_module.pyc" not in names
    assert uncompiled(archive) == [] and compile_zip(archive) == 0

    # A worker formats a UDF's error with `traceback`: it names the source inside the zip and
    # quotes its line.
    loaded = imported_from(
        archive,
        "import traceback, package.module as m\nprint(m.__file__)\n"
        "try:\n    m.fail()\nexcept ValueError:\n    print(traceback.format_exc())",
    )
    lines = loaded.stdout.splitlines()
    assert lines[0] == f"{archive}/package/module.pyc", loaded.stderr
    assert f'File "{archive}/package/module.py", line 2, in fail' in loaded.stdout
    assert 'raise ValueError("from the zip")' in loaded.stdout


def test_the_installed_pysparks_worker_zips_have_their_bytecode() -> None:
    """`make install` compiled them: a worker imports `pyspark.worker` as bytecode."""
    zips = worker_zips()
    assert {path.name for path in zips} >= {"pyspark.zip"}
    assert all(uncompiled(path) == [] for path in zips), [path.name for path in zips if uncompiled(path)]
    pyspark_zip = next(path for path in zips if path.name == "pyspark.zip")
    loaded = imported_from(pyspark_zip, "import pyspark.worker as w; print(w.__file__)")
    assert loaded.stdout.strip() == f"{pyspark_zip}/pyspark/worker.pyc", loaded.stderr
