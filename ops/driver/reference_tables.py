"""Reference (lookup) tables in the lake: versioned Parquet directories, replaced atomically.

A reference table lives in one directory with one subdirectory per published version:

    <lake>/<reference.path>/version=<name>/part-*.parquet
                                          /_SUCCESS

A version is complete once its `_SUCCESS` marker exists, which is what Spark's file committer
writes last (`df.write.parquet(root / "version=<name>")` publishes a version) and what
`publish_reference` writes last. Readers use the complete version whose name sorts last, so a
publisher never exposes half a table and a reader never mixes two versions; names should sort in
publication order (a UTC timestamp such as `20250101T120000`). Old versions may be deleted once no
batch can still be reading them (a grace of a few trigger intervals).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ops.atomic import replacing

VERSION_PREFIX = "version="
COMPLETE_MARKER = "_SUCCESS"


def current_version(root: Path) -> Path | None:
    """The directory of the newest complete version under `root`, or None if none is published."""
    try:
        candidates = [path for path in root.iterdir() if path.name.startswith(VERSION_PREFIX)]
    except FileNotFoundError:
        return None
    complete = [path for path in candidates if (path / COMPLETE_MARKER).exists()]
    return max(complete, key=lambda path: path.name) if complete else None


def version_name(version_dir: Path) -> str:
    """The version's name, as recorded with each enriched row (`version=<name>` -> `<name>`)."""
    return version_dir.name.removeprefix(VERSION_PREFIX)


def publish_reference(root: Path, version: str, table: pa.Table) -> Path:
    """Write `table` as version `version` of the reference table at `root`; the marker goes last."""
    version_dir = root / f"{VERSION_PREFIX}{version}"
    if version_dir.exists():
        shutil.rmtree(version_dir)
    version_dir.mkdir(parents=True)
    with replacing(version_dir / "part-00000.parquet") as temp_path:
        pq.write_table(table, temp_path)
    (version_dir / COMPLETE_MARKER).touch()
    return version_dir
