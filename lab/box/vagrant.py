"""Vagrant's view of boxes: the parser of `vagrant box list --machine-readable` (pure) and where
Vagrant keeps an added box's files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

PROVIDER = "libvirt"


@dataclass(frozen=True)
class VagrantBox:
    name: str
    provider: str
    version: str


def _unescape(data: str) -> str:
    return data.replace("%!(VAGRANT_COMMA)", ",").replace("\\n", "\n").replace("\\r", "\r")


def parse_box_list(text: str) -> list[VagrantBox]:
    """Boxes from `vagrant box list --machine-readable` output.

    Lines are `timestamp,target,type,data...`; each box starts with `box-name`, followed by
    `box-provider`, `box-version` (and, on newer Vagrant, `box-architecture`). `ui` lines repeat
    the same data for humans and are ignored, as is any type this parser does not know.
    """
    boxes: list[VagrantBox] = []
    current: dict[str, str] | None = None

    def flush() -> None:
        if current and current.get("name"):
            boxes.append(
                VagrantBox(
                    name=current["name"],
                    provider=current.get("provider", ""),
                    version=current.get("version", ""),
                )
            )

    for raw in text.splitlines():
        parts = raw.split(",", 3)
        if len(parts) < 4:
            continue
        kind, data = parts[2], _unescape(parts[3])
        if kind == "box-name":
            flush()
            current = {"name": data}
        elif kind in ("box-provider", "box-version") and current is not None:
            current[kind.removeprefix("box-")] = data
    flush()
    return boxes


def vagrant_home() -> Path:
    env = os.environ.get("VAGRANT_HOME")
    return Path(env) if env else Path.home() / ".vagrant.d"


def escape_name(name: str) -> str:
    """Vagrant's directory name for a box name (`a/b` -> `a-VAGRANTSLASH-b`)."""
    return name.replace("/", "-VAGRANTSLASH-")


def box_dirs(name: str, provider: str = PROVIDER, home: Path | None = None) -> list[Path]:
    """Directories holding `name` for `provider`, any version (and architecture on newer Vagrant)."""
    base = (home or vagrant_home()) / "boxes" / escape_name(name)
    if not base.is_dir():
        return []
    found = [p for p in base.glob(f"*/{provider}") if p.is_dir()]
    found += [p for p in base.glob(f"*/*/{provider}") if p.is_dir()]
    return sorted(found)


def image_bytes(name: str, home: Path | None = None) -> int | None:
    """The size of the box's disk image as Vagrant keeps it (what vagrant-libvirt uploads to a
    pool), the newest version's; None if the box is not added."""
    images = sorted(p for d in box_dirs(name, home=home) for p in d.glob("box*.img"))
    return images[-1].stat().st_size if images else None


def box_dir(name: str, version: str, provider: str = PROVIDER, home: Path | None = None) -> Path | None:
    for d in box_dirs(name, provider, home):
        rel = d.relative_to((home or vagrant_home()) / "boxes" / escape_name(name))
        if rel.parts[0] == version:
            return d
    return None


def is_complete(d: Path) -> bool:
    """An added libvirt box has at least its metadata and its disk image."""
    return (d / "metadata.json").is_file() and (d / "box.img").is_file()


def read_marker(d: Path | None, filename: str = "slurmlab.json") -> dict | None:
    """The slurmlab.json that identifies a slurmlab-built box, or None (not ours, or unreadable)."""
    if d is None:
        return None
    try:
        doc = json.loads((d / filename).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("inputs_hash") else None
