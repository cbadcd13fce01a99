"""Headless Chromium for the UI tests: Debian's binary, driven by Playwright, and where the
screenshots of each step go (`.runtime/test-artifacts/ui/`, gitignored)."""

from __future__ import annotations

from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / ".runtime" / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
