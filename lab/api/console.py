"""The instructor's console: one HTML page (no build step) that polls GET /_lab/state."""

from __future__ import annotations

from functools import cache
from pathlib import Path

PAGE = Path(__file__).with_name("console.html")


@cache
def page() -> bytes:
    return PAGE.read_bytes()
