"""Adding a built box to Vagrant (`vagrant box add --force`), never leaving a half-added box."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from lab.errors import CommandFailed

from . import vagrant as vg
from .process import env, run


def vagrant_add(name: str, box: Path, h: str, say: Callable[..., None]) -> None:
    """`vagrant box add --force`; never leaves a half-added box behind."""
    say("vagrant box add", f"{name} from {box}")
    try:
        run(["vagrant", "box", "add", "--force", "--name", name, str(box)])
    except BaseException:
        _remove_partial(name)
        raise
    d = vg.box_dir(name, "0")
    marker = vg.read_marker(d)
    if not d or not vg.is_complete(d) or not marker or marker.get("inputs_hash") != h:
        raise CommandFailed(
            ["vagrant", "box", "add", "--force", "--name", name, str(box)],
            0,
            f"the added box in {d} does not carry inputs hash {h}",
        )
    # vagrant-libvirt uploads a box into the pool once and never refreshes it: drop stale copies
    from lab.host import libvirtd

    stale = libvirtd.prune_box_volumes(name, keep_newest=False)
    say("vagrant box add", "done" + (f"; removed {len(stale)} stale copies from the pool" if stale else ""))


def _remove_partial(name: str) -> None:
    for d in vg.box_dirs(name):
        if not vg.is_complete(d):
            version = d.relative_to(vg.vagrant_home() / "boxes" / vg.escape_name(name)).parts[0]
            r = subprocess.run(
                ["vagrant", "box", "remove", "--force", "--provider", vg.PROVIDER, "--box-version", version, name],
                capture_output=True,
                env=env(),
                check=False,
            )
            if r.returncode != 0:
                shutil.rmtree(d, ignore_errors=True)
