"""Boxes as HyperPod images: UpdateClusterSoftware's `ImageId` names a box added to Vagrant.

Each slurmlab box gets an ImageId `ami-` + 17 hex digits (a hash of its name and its inputs hash:
the model's pattern `ami-[0-9a-fA-F]{8,17}`), shown by `slurmlab box list`. `default` (or no
ImageId) is the default box built from the current inputs. `tag(NAME)` adds the current box once
more under another name: a second image with the same content and a new release of its line
(lab/box/releases.py), which is what a rolling update or an auto-patch needs when there is no newer build.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from lab import box as boxes
from lab.errors import LabError, NotFound, UsageError

DEFAULT_IMAGE = "default"


def image_id(name: str, inputs_hash: str) -> str:
    return "ami-" + hashlib.sha256(f"{name}/{inputs_hash}".encode()).hexdigest()[:17]


def installed() -> dict[str, str]:
    """ImageId -> box name, for every slurmlab box added to Vagrant."""
    return {image_id(b.name, b.inputs_hash): b.name for b in boxes.list_boxes() if b.slurmlab and b.added}


def resolve(image: str | None, lookup: Callable[[], dict[str, str]] = installed) -> str:
    """The box an ImageId names (None or `default`: the default box, which must be current)."""
    if image in (None, DEFAULT_IMAGE):
        if not boxes.is_current(boxes.DEFAULT_BOX):
            raise NotFound(f"ImageId default: box {boxes.DEFAULT_BOX} is missing or out of date", "slurmlab box build")
        return boxes.DEFAULT_BOX
    try:
        found = lookup()
    except LabError as e:  # no vagrant here (a sim-only lab): no box to name
        raise UsageError(f"ImageId: '{image}': the lab's boxes cannot be listed ({e.message})", e.fix) from None
    if image not in found:
        known = ", ".join(f"{i} ({n})" for i, n in sorted(found.items())) or "none"
        raise UsageError(f"ImageId: '{image}' names no box of this lab (the boxes: {known})",
                         "slurmlab box list shows each box's ImageId; slurmlab box tag NAME adds one")
    return found[image]


def tag(name: str, progress: Callable[[str], None] = lambda s: None, *, security: bool = False):
    """Add the current default box to Vagrant under `name` too (built first if needed): a new release of its
    line (lab/box/releases.py). Returns (its ImageId, its Release)."""
    from lab.box import cache, install, releases
    from lab.box import vagrant as vg

    if name == boxes.DEFAULT_BOX:
        raise UsageError(f"box {name} is the default box itself", "give another name, e.g. slurmlab/trixie-slurm-next")
    info = boxes.build(progress=progress)
    path = cache.box_file(info.inputs_hash)
    if not path.is_file():
        raise NotFound(f"the .box file of {info.inputs_hash} is not in the cache ({path})", "slurmlab box build --force")
    install.vagrant_add(name, path, info.inputs_hash, lambda step, what="": progress(f"{step}: {what}"))
    marker = vg.read_marker(vg.box_dir(name, "0")) or {"inputs_hash": info.inputs_hash}
    return image_id(name, info.inputs_hash), releases.register(name, marker, security=security)
