"""The fingerprints of a full configuration (issue 42's `twin`), kept between runs (issue 43).

A node that a full configuration makes depends on the box and on the files that configure it, not on the
engine, the API or the CLI. The twin's fingerprints (tests/e2e/equivalence.py) are kept under the lab's
cache (`paths.cache()/e2e/`, outside the clone, as the box is) with a key that is the box image's identity
and a hash of every file that shapes a node's configuration: the roles, the playbooks, the example spec
and its lifecycle scripts, the lab's package apart from the parts that never reach a node (`NOT_A_NODE`),
the pinned Python packages (Ansible's version). A run whose key has fingerprints compares the role
templates' forks with them and makes no twin; any change to one of those files, or another box, makes
the twin again. `SLURMLAB_E2E_TWIN=build` always makes it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

from lab import paths

REPO = Path(__file__).resolve().parents[2]
# what shapes a node's configuration: every file under these (folders) or these files
SHAPES = ("roles", "playbooks", "lab", "examples/workshop.yaml", "examples/lifecycle", "pyproject.toml",
          "tests/e2e/equivalence.py")
# parts of the package that never reach a node: the engine's scheduling, the API, the CLI's commands,
# stored state, host set-up, verify's checks (what a node is made of is lab/configure's, lab/box's, lab/providers')
NOT_A_NODE = ("lab/engine/", "lab/api/", "lab/control/", "lab/cmd/", "lab/workflows/", "lab/verify/",
              "lab/store/", "lab/host/", "lab/cli.py", "lab/doctor.py", "lab/output.py", "lab/importgraph.py",
              "lab/exitcodes.py", "lab/errors.py")


def _files() -> list[Path]:
    out: list[Path] = []
    for part in SHAPES:
        p = REPO / part
        found = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        out += [x for x in found if "__pycache__" not in x.parts
                and not str(x.relative_to(REPO)).startswith(NOT_A_NODE)]
    return out


def key(box_image: Path) -> str:
    """The box image's identity (path, size, mtime, its marker) and the hash of every shaping file."""
    h = hashlib.sha256()
    st = box_image.stat()
    marker = box_image.parent / "slurmlab.json"
    h.update(json.dumps([str(box_image), st.st_size, st.st_mtime_ns,
                         marker.read_text() if marker.exists() else ""]).encode())
    for f in _files():
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def _path(k: str) -> Path:
    return paths.cache() / "e2e" / f"full-configuration-{k}.json.gz"


def load(k: str) -> dict[str, str] | None:
    """{role: the twin's fingerprint} made with the same key, or None (none kept, or a build is forced)."""
    if os.environ.get("SLURMLAB_E2E_TWIN") == "build" or not _path(k).is_file():
        return None
    return json.loads(gzip.decompress(_path(k).read_bytes()))


def save(k: str, prints: dict[str, str]) -> Path:
    """Keep the fingerprints (only this key's: older keys' files are removed)."""
    p = _path(k)
    p.parent.mkdir(parents=True, exist_ok=True)
    for old in p.parent.glob("full-configuration-*.json.gz"):
        old.unlink()
    tmp = p.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(prints).encode()))
    tmp.replace(p)
    return p
