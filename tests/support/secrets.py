"""Where secret values turn up: a scan of databases (every table, every column), files (logs, the
SQLite files themselves, byte for byte) and texts (captured output, Slack message bodies)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import sqlalchemy as sa


def secret_value(kind: str) -> str:
    """A value no run could produce by chance, so finding it anywhere means it leaked."""
    return f"{kind}-{uuid.uuid4().hex}"


def database_leaks(url: str, values: Iterable[str], *, skip_tables: Iterable[str] = ()) -> list[str]:
    """`table.column` for every cell of the database at `url` that holds one of `values`."""
    wanted = list(values)
    skipped = set(skip_tables)
    engine = sa.create_engine(url)
    try:
        tables = sa.MetaData()
        tables.reflect(engine)
        found = []
        with engine.connect() as connection:
            for table in tables.sorted_tables:
                if table.name in skipped:
                    continue
                for row in connection.execute(sa.select(table)):
                    for column, cell in row._mapping.items():
                        text = cell.decode(errors="replace") if isinstance(cell, bytes) else str(cell)
                        if any(value in text for value in wanted):
                            found.append(f"{table.name}.{column}")
        return found
    finally:
        engine.dispose()


def file_leaks(roots: Iterable[Path], values: Iterable[str]) -> list[str]:
    """Every file under `roots` whose bytes hold one of `values`."""
    wanted = [value.encode() for value in values]
    return [
        str(path)
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.is_file() and any(value in path.read_bytes() for value in wanted)
    ]


def text_leaks(texts: Mapping[str, str | bytes], values: Iterable[str]) -> list[str]:
    """The names of the `texts` that hold one of `values`."""
    wanted = list(values)
    return [
        name
        for name, text in texts.items()
        if any(
            value in (text.decode(errors="replace") if isinstance(text, bytes) else text) for value in wanted
        )
    ]
