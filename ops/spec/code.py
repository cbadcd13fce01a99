"""A job's own code on disk (`kind: python`): the files that make it up and their digest.

The digest is part of the job's config version (`ops.spec.job.load_job`), so the ledger, a
savepoint and a restatement know which code ran, and a driver launched for one version refuses to
start on another, as it does for an edited job file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

# What a code directory holds that is not code: caches, and editors' and tools' hidden files.
_SKIPPED_DIRS = frozenset({"__pycache__"})


def code_files(directory: Path) -> Iterator[Path]:
    """The files of a code directory, sorted, without caches and hidden files."""
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory).parts
        if path.is_file() and not any(part.startswith(".") or part in _SKIPPED_DIRS for part in relative):
            yield path


def code_digest(directory: Path) -> str:
    """A digest of every file's relative path and bytes."""
    digest = hashlib.sha256()
    for path in code_files(directory):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
