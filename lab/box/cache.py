"""The box cache: cache()/boxes/<inputs hash>/<box file>, the work directories of builds under
way (`.work-*`), and the lock that lets one build run at a time."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from lab.paths import cache

from . import recipe as rc

WORK_PREFIX = ".work-"


def boxes_dir() -> Path:
    return cache() / "boxes"


def box_file(h: str, suite: str = rc.DEFAULT_SUITE) -> Path:
    return boxes_dir() / h / rc.box_filename(suite)



@contextlib.contextmanager
def build_lock(progress: Callable[[str], None]) -> Iterator[None]:
    boxes_dir().mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(boxes_dir() / ".build.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress("waiting for another box build to finish")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()



def prune_cache(keep: str, suite: str = rc.DEFAULT_SUITE) -> None:
    """Delete cached boxes of the same line built from other inputs (Vagrant keeps its own copy of
    added boxes); other lines' boxes stay."""
    for d in boxes_dir().iterdir():
        if d.is_dir() and not d.name.startswith(".") and d.name != keep and (d / rc.box_filename(suite)).exists():
            shutil.rmtree(d, ignore_errors=True)

