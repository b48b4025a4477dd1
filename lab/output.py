"""Rendering for the CLI: data on stdout (table or JSON), human progress on stderr. NO_COLOR honoured."""

from __future__ import annotations

import json
import os
import sys
import time
from enum import Enum

from rich.console import Console


class Output(str, Enum):
    text = "text"
    json = "json"


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


out = Console(no_color=_no_color(), highlight=False, soft_wrap=True)
err = Console(stderr=True, no_color=_no_color(), highlight=False, soft_wrap=True)


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


class Progress:
    """Timestamped progress lines on stderr: `[  12.3s] message`."""

    def __init__(self, quiet: bool = False):
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            err.print(f"[dim][{time.monotonic() - self.t0:6.1f}s][/dim] {msg}", markup=True, highlight=False)
