"""The platform's clock: every stored or compared time is an aware UTC datetime."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, in UTC, zone attached."""
    return datetime.now(UTC)
