"""The repository stands alone: what a newcomer needs to read is in it (docs/architecture.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Documents the platform's authors kept beside the repository, never part of it.
OUTSIDE = ("DESIGN" + ".md", "FACTS" + ".md", "../" + "shared")


def test_no_tracked_file_points_at_documents_outside_the_repository() -> None:
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    pointing = []
    for name in filter(None, tracked):
        path = REPO / name
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        pointing += [f"{name}: {target}" for target in OUTSIDE if target in text]
    assert pointing == []
