"""One way to replace a file so readers see the old content or the new, never a partial write,
and one to create a file that readers see whole or not at all, never over an existing one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A hidden temporary path beside `path` to write to; a clean exit renames it over `path`.

    The rename is atomic on one file system, so a reader (a Spark file source, the supervisor
    polling a heartbeat) never sees a half-written file; on an error the temporary file is removed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    temporary = Path(temp_name)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomically(path: Path, content: bytes | str) -> None:
    """Replace `path` with `content` (text is written as UTF-8) in one rename."""
    with replacing(path) as temporary:
        temporary.write_bytes(content.encode() if isinstance(content, str) else content)


def create_atomically(path: Path, content: bytes | str) -> None:
    """Create `path` holding `content`, whole in one step; `FileExistsError` if it exists.

    The content is written beside it and hard-linked into place: a link, unlike a rename, never
    replaces a file, so of two writers racing for one name exactly one wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    temporary = Path(temp_name)
    try:
        temporary.write_bytes(content.encode() if isinstance(content, str) else content)
        os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_if_changed(path: Path, content: bytes | str) -> bool:
    """Replace `path` with `content` in one rename unless it holds exactly that already; whether
    it was replaced. For files a reader watches and reloads on every change (Prometheus' file_sd):
    an unchanged file keeps its inode and mtime, and the reader has nothing to do."""
    data = content.encode() if isinstance(content, str) else content
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    write_atomically(path, data)
    return True
