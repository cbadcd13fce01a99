"""A job's own code on disk (`kind: python`): the files that make it up and their digest.

The digest is part of the job's config version (`ops.spec.job.load_job`), so the ledger, a
savepoint and a restatement know which code ran, and a driver launched for one version refuses to
start on another, as it does for an edited job file.
"""

from __future__ import annotations

import hashlib
import time
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
    """A digest of every file's relative path and bytes.

    Every reconcile pass loads the job file, so the digest is kept per directory with the files'
    sizes and modification times, and the files are read again only when one of those changed.
    A file system stamps times with a coarse clock, so two writes of the same size a moment apart
    can carry the same time: files changed within `SETTLE_SECONDS` are always read.
    """
    files = list(code_files(directory))
    stamps = tuple((path, (stat := path.stat()).st_size, stat.st_mtime_ns) for path in files)
    known = _DIGESTS.get(directory)
    if known is not None and known[0] == stamps:
        return known[1]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    newest = max((mtime for _, _, mtime in stamps), default=0)
    if time.time_ns() - newest > SETTLE_SECONDS * 1e9:
        _DIGESTS[directory] = (stamps, digest.hexdigest())
    return digest.hexdigest()


SETTLE_SECONDS = 2


_DIGESTS: dict[Path, tuple[tuple[tuple[Path, int, int], ...], str]] = {}
