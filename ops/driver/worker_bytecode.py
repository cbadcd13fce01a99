"""Compiled bytecode for PySpark's Python workers, written into the zips they import from.

Spark starts a job's Python workers with `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip)
first on their path, so every worker imports `pyspark` from that zip, never from site-packages.
A pip-installed PySpark ships the zip with sources only, and Python never caches bytecode of a
module it imports from a zip: each worker the daemon forks (it forks one per task slot, and
imports `pyspark.worker` after the fork) compiled PySpark again, about 0.6 CPU-seconds a worker
on this machine (`python -m benchmarks.worker_bytecode`).

`python -m ops.driver.worker_bytecode` (run by `make install`) adds to each zip a `.pyc` beside
each `.py`, where zipimport looks for it. The bytecode is hash-based and unchecked (PEP 552): it
is never compared with the source, which sits in the same zip and does not change without a new
zip. A zip that already has its bytecode is left alone; a zip is replaced atomically, so a worker
starting meanwhile reads the old one or the new one.
"""

from __future__ import annotations

import os
import py_compile
import re
import sys
import tempfile
import zipfile
from pathlib import Path


def worker_zips() -> list[Path]:
    """The zips Spark puts on its Python workers' path (those of the installed PySpark)."""
    import pyspark

    return sorted((Path(pyspark.__file__).resolve().parent / "python" / "lib").glob("*.zip"))


# PySpark's own test modules (`pyspark/.../tests/...`), which no worker imports (and some of which
# warn as they compile).
TESTS = re.compile(r"(^|/)tests/")


def uncompiled(archive: Path) -> list[str]:
    """The modules of `archive` (its tests aside) without bytecode beside them."""
    with zipfile.ZipFile(archive) as bundle:
        names = set(bundle.namelist())
    return sorted(
        name for name in names if name.endswith(".py") and not TESTS.search(name) and f"{name}c" not in names
    )


def compile_zip(archive: Path) -> int:
    """Add bytecode for every module of `archive` (its tests aside) that has none; how many
    modules got it."""
    missing = uncompiled(archive)
    if not missing:
        return 0
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=f".{archive.name}.") as scratch:
        tree = Path(scratch) / "tree"
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(tree)
            entries = bundle.infolist()
        for name in missing:
            # `dfile`: tracebacks name the module inside the zip, as when it is compiled from there.
            py_compile.compile(
                str(tree / name),
                cfile=str(tree / f"{name}c"),
                dfile=f"{archive}/{name}",
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        partial = Path(scratch) / archive.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
            for entry in entries:
                bundle.writestr(entry, (tree / entry.filename).read_bytes() if not entry.is_dir() else b"")
            for name in missing:
                bundle.write(tree / f"{name}c", f"{name}c")
        os.replace(partial, archive)
    return len(missing)


def main() -> int:
    for archive in worker_zips():
        added = compile_zip(archive)
        print(f"{archive.name}: {f'bytecode added for {added} modules' if added else 'compiled already'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
