"""The slurmlab Vagrant box: Debian 13 (trixie) with Slurm 24.11, built offline-capable from
Debian's mirror, cached by the hash of its inputs, added to Vagrant as a libvirt box.

    build()        make sure the box from the current inputs is added to Vagrant (builds if needed)
    list_boxes()   boxes added to Vagrant, which are slurmlab-built, which are current
    is_current()   the named box is added and was built from the current inputs
    require()      the named box (or the default) is ready for VMs, else NotFound with the fix
    inputs_hash()  the cache key: recipe (suite, mirror, packages, ...) + customize.sh

Stages of a build: preflight (root, tools, space), cache (paths, lock, pruning), process (the
commands, build.log, SIGTERM), image (build_image, stage by stage), install (vagrant box add),
teardown (work directories of failed or killed builds). See docs/box.md.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.errors import CommandFailed, HostError, LabError, NotFound

from . import cache as _cache
from . import image as _image
from . import install as _install
from . import preflight as _pre
from . import process as _proc
from . import recipe as _recipe
from . import teardown as _td
from . import vagrant as _vg

WORKSHOP_FEATURE = _recipe.WORKSHOP_FEATURE
DEFAULT_BOX = _recipe.box_name()  # slurmlab/trixie-slurm; slurmlab/forky-slurm is the other line

__all__ = ["DEFAULT_BOX", "BoxInfo", "added_inputs", "build", "features", "image_bytes", "inputs_hash", "is_current", "list_boxes", "require"]


@dataclass
class BoxInfo:
    name: str
    inputs_hash: str  # "" for a box slurmlab did not build
    path: Path | None  # the .box file in slurmlab's cache, if it is there
    size_bytes: int | None  # size of that .box file
    added: bool  # added to Vagrant
    built_at: str | None  # ISO 8601 UTC, from the box's slurmlab.json
    provider: str = _vg.PROVIDER
    version: str = "0"
    slurmlab: bool = False  # carries a slurmlab.json
    current: bool = False  # slurmlab-built from the current inputs
    slurm_version: str | None = None


def inputs_hash(suite: str = _recipe.DEFAULT_SUITE) -> str:
    """The hash of everything that makes a line's image: recipe, package list, mirror, customize.sh."""
    return _recipe.inputs_hash(_recipe.default_recipe(suite))


def suite_of(name: str, marker: dict | None = None) -> str:
    """The line a box belongs to: by its name, else by what its slurmlab.json says, else the default."""
    got = _recipe.suite_of(name) or (marker or {}).get("debian_suite")
    return got if got in _recipe.LINES else _recipe.DEFAULT_SUITE


def _added_marker(name: str) -> dict | None:
    """slurmlab.json of the complete box `name` (version 0) in Vagrant's box directory."""
    d = _vg.box_dir(name, "0")
    if d is None or not _vg.is_complete(d):
        return None
    return _vg.read_marker(d)


def added_inputs(name: str) -> str | None:
    """The inputs hash of the complete box `name` in Vagrant (None: not added, or not slurmlab's)."""
    return (_added_marker(name) or {}).get("inputs_hash")


def features(name: str = DEFAULT_BOX) -> list[str]:
    """What the added box `name` can do beyond a plain boot (its slurmlab.json's features: "warm-start",
    "workshop"); [] when it is not added or not slurmlab's."""
    return list((_added_marker(name) or {}).get("features") or [])


def image_bytes(name: str = DEFAULT_BOX) -> int | None:
    """The size of the added box's disk image (what a host's pool must take), None if not added."""
    return _vg.image_bytes(name)


def is_current(name: str = DEFAULT_BOX) -> bool:
    """Added to Vagrant AND built from its line's current inputs (reads Vagrant's box directory: fast)."""
    marker = _added_marker(name)
    return bool(marker) and marker.get("inputs_hash") == inputs_hash(suite_of(name, marker))


def _cached(h: str, suite: str = _recipe.DEFAULT_SUITE) -> tuple[Path | None, int | None]:
    f = _cache.box_file(h, suite)
    with contextlib.suppress(OSError):
        return f, f.stat().st_size
    return None, None


def _info(name: str, h: str, marker: dict | None, added: bool) -> BoxInfo:
    suite = suite_of(name, marker)
    path, size = _cached(h, suite)
    return BoxInfo(
        name=name,
        inputs_hash=h,
        path=path,
        size_bytes=size,
        added=added,
        built_at=(marker or {}).get("built_at"),
        slurmlab=marker is not None,
        current=h == inputs_hash(suite),
        slurm_version=(marker or {}).get("slurm_version"),
    )


def build(
    name: str | None = None,
    *,
    suite: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] = lambda s: None,
) -> BoxInfo:
    """Make sure box `name` (default: the line's, slurmlab/<suite>-slurm), built from the current inputs
    of line `suite` (default: the name's line, else trixie), is added to Vagrant and registered as a
    release of its line (lab/box/releases.py).

    Up to date: returns at once. Cached .box but not added: `vagrant box add` only. Otherwise (or
    with force=True) builds the image (needs root, ~3 GiB free in the cache, the Debian mirror),
    then adds it. A failed or interrupted build leaves no work files, mounts, loop devices or
    half-added box behind.
    """
    recipe = _recipe.default_recipe(suite or _recipe.suite_of(name or "") or _recipe.DEFAULT_SUITE)
    suite = recipe.suite
    name = name or _recipe.box_name(suite)
    h = _recipe.inputs_hash(recipe)
    if not force:
        marker = _added_marker(name)
        if marker and marker.get("inputs_hash") == h:
            progress(f"box up to date: {name} ({h})")
            with contextlib.suppress(LabError):  # best effort: never fail an up-to-date build
                _td.cleanup_stale_if_idle(progress)
            return _info(name, h, marker, added=True)

    say = _image.Clock(progress)
    with _proc.sigterm_raises(), _cache.build_lock(progress):
        marker = _added_marker(name)
        if not force and marker and marker.get("inputs_hash") == h:
            progress(f"box up to date: {name} ({h})")  # another process built it meanwhile
            return _info(name, h, marker, added=True)

        box = _cache.box_file(h, suite)
        if force or not box.is_file():
            if _pre.is_root():
                _td.cleanup_stale(progress)  # before the space check: stale dirs hold space
            _pre.check_build_host(_cache.boxes_dir())
            progress(f"building box {name} from inputs {h}")
            script_text = _recipe.CUSTOMIZE_SCRIPT.read_text()
            if _recipe.inputs_hash(recipe, script_text) != h:
                raise HostError("the box recipe changed while the build started", "run the build again")
            box = _image.build_image(name, h, recipe, script_text, say)
            _cache.prune_cache(keep=h, suite=suite)
        else:
            _pre.check_tools(_pre.ADD_TOOLS)
            progress(f"box {h} is in the cache: {box}")
        _install.vagrant_add(name, box, h, say)
        marker = _added_marker(name)
        from . import releases

        releases.register(name, marker or {})
        return _info(name, h, marker, added=True)


def list_boxes() -> list[BoxInfo]:
    """All boxes added to Vagrant, with slurmlab's marker (if any) and whether it is current."""
    _pre.check_tools(_pre.ADD_TOOLS)
    cmd = ["vagrant", "box", "list", "--machine-readable"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_proc.env(), check=False)
    if r.returncode != 0:
        raise CommandFailed(cmd, r.returncode, r.stdout + r.stderr)
    result = []
    for box in _vg.parse_box_list(r.stdout):
        marker = _vg.read_marker(_vg.box_dir(box.name, box.version, box.provider))
        h = (marker or {}).get("inputs_hash", "")
        info = (
            _info(box.name, h, marker, added=True)
            if marker
            else BoxInfo(name=box.name, inputs_hash="", path=None, size_bytes=None, added=True, built_at=None)
        )
        info.provider, info.version = box.provider, box.version
        result.append(info)
    return result


def require(name: str | None) -> None:
    """The spec's box (or the default) must be added to Vagrant before any VM starts."""
    name = name or DEFAULT_BOX
    line = _recipe.suite_of(name)
    if line is not None:
        if not is_current(name):
            raise NotFound(f"box {name} is missing or out of date", "slurmlab box build"
                           + ("" if line == _recipe.DEFAULT_SUITE else f" --suite {line}"))
        return
    if not any(b.name == name and b.added for b in list_boxes()):
        raise NotFound(f"box {name} (Lab.Box in the spec) is not added to Vagrant",
                       f"vagrant box add --name {name} FILE.box, or remove Lab.Box to use {DEFAULT_BOX}")
