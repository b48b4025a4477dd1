"""Image releases (issue 32, docs/adr/0019): every slurmlab box added to Vagrant is a release of its
line, with a version in HyperPod's `ImageReleaseVersion` form (MAJOR.MINOR.PATCH).

- A line is a Debian suite with its Slurm series: `trixie-slurm` (Slurm 24.11), `forky-slurm` (26.05).
- A release is one box (Vagrant name + inputs hash). Its version is given once, when the lab first
  sees it (`slurmlab box build`, `slurmlab box tag`, or any listing), as YEAR.MONTH.N of that day, N
  counting the lab's releases of that month (all lines: a version names one release, as a node records
  only the version): 2026.12.1, 2026.12.2, ... Versions never change and are never reused; the
  registry is `cache()/boxes/releases.json`.
- A release stays known when its box leaves Vagrant (`available` False): the nodes made from it still
  report it, and nothing new can be made from it.
- `status()` is HyperPod's ImageVersionStatus of a node on a release: UpToDate, UpdateAvailable (a
  newer release of its line is available), SecurityUpdateRequired (one of those is marked security:
  `slurmlab box tag --security`), EndOfLife (its release is gone and its line has nothing newer).
- Per host (issue 47): an entry's `hosts` maps each other libvirt host whose pool holds its image to
  those volumes (a template's `slurmlab_tpl_*`, recorded by lab/providers/hosttemplates.py; a
  vagrant-libvirt box volume, recorded when a node made from it is recognised:
  lab/providers/imagerelease.py). A Release's `hosts` names them, and `local` while its box is added
  to Vagrant here.
- `slurm_step()`: Slurm upgrades in place from the two previous major releases (three since 24.11:
  24.11 -> 26.05 is allowed) and never downgrades; a change beyond that is refused with the reason.

Reads Vagrant's box folder and one small JSON file: no subprocess.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from lab.host.registry import LOCAL
from lab.osutil import atomic_write
from lab.paths import cache

from . import vagrant as vg

VERSION_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
STATUSES = ("UpToDate", "UpdateAvailable", "SecurityUpdateRequired", "EndOfLife")


@dataclass(frozen=True)
class Release:
    version: str
    line: str  # e.g. trixie-slurm
    box: str  # the Vagrant box name
    inputs_hash: str
    slurm_version: str | None = None
    built_at: str | None = None
    registered_at: str | None = None
    security: bool = False
    available: bool = True  # its box is added to Vagrant now
    hosts: tuple[str, ...] = ()  # the hosts holding its image: `local` (its box in Vagrant here), others' pools

    def to_json(self) -> dict:
        return asdict(self)


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def line_of(marker: dict) -> str:
    return f"{marker.get('debian_suite') or 'trixie'}-slurm"


def registry_path() -> Path:
    return cache() / "boxes" / "releases.json"


def _load() -> dict:
    try:
        doc = json.loads(registry_path().read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _added() -> list[tuple[str, dict]]:
    """(box name, slurmlab.json) of every complete slurmlab box in Vagrant's folder (version 0)."""
    base = vg.vagrant_home() / "boxes"
    out = []
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        name = d.name.replace("-VAGRANTSLASH-", "/")
        box = vg.box_dir(name, "0")
        if box is not None and vg.is_complete(box) and (marker := vg.read_marker(box)):
            out.append((name, marker))
    return out


def next_version(taken: list[str], now: float) -> str:
    """The version of the next release: YEAR.MONTH.N of `now` (UTC), newer than every one `taken`
    (after a clock set back: the newest taken one's YEAR.MONTH with the next N)."""
    t = time.gmtime(now)
    keys = [version_key(v) for v in taken]
    month = (t.tm_year, t.tm_mon)
    newest = max(keys, default=(0, 0, 0))
    if newest[:2] > month:
        month = newest[:2]
    n = 1 + max((k[2] for k in keys if k[:2] == month), default=0)
    return f"{month[0]}.{month[1]}.{n}"


def _entry(doc: dict, box: str, marker: dict, security: bool, now: float) -> dict:
    key = f"{box}|{marker.get('inputs_hash', '')}"
    e = doc.get(key)
    if e is None:
        line = line_of(marker)
        taken = [x["version"] for x in doc.values()]  # every line's: a version names one release of the lab
        e = doc[key] = {"version": next_version(taken, now), "line": line, "box": box,
                        "inputs_hash": marker.get("inputs_hash", ""), "slurm_version": marker.get("slurm_version"),
                        "built_at": marker.get("built_at"), "security": security,
                        "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
    elif security and not e.get("security"):
        e["security"] = True
    return e


def _release(e: dict, available: bool) -> Release:
    """An entry as a Release (its `hosts`: the local host while available, then the others that hold it)."""
    others = sorted(h for h, vols in (e.get("hosts") or {}).items() if vols and h != LOCAL)
    return Release(**{**e, "available": available, "hosts": tuple(([LOCAL] if available else []) + others)})


def _save(doc: dict) -> None:
    atomic_write(registry_path(), json.dumps(doc, indent=2, sort_keys=True) + "\n")


def register(box: str, marker: dict, *, security: bool = False, now: float | None = None) -> Release:
    """The release of box `box` as its slurmlab.json describes it (a new version if the lab has not seen it)."""
    registry_path().parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(registry_path()) + ".lock"):
        doc = _load()
        e = _entry(doc, box, marker, security, time.time() if now is None else now)
        _save(doc)
    return _release(e, True)


def catalog() -> list[Release]:
    """Every release the lab knows, oldest first within a line; boxes in Vagrant not yet registered are."""
    added = _added()
    doc = _load()
    if any(f"{n}|{m.get('inputs_hash', '')}" not in doc for n, m in added):
        registry_path().parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(registry_path()) + ".lock"):
            doc = _load()
            for n, m in sorted(added, key=lambda x: x[1].get("built_at") or ""):
                _entry(doc, n, m, False, time.time())
            _save(doc)
    here = {f"{n}|{m.get('inputs_hash', '')}" for n, m in added}
    out = [_release(e, k in here) for k, e in doc.items()]
    return sorted(out, key=lambda r: (r.line, version_key(r.version)))


# ---------------------------------------------------------------- per host (issue 47)
def record_on_host(host: str, box: str, inputs_hash: str, volumes, marker: dict | None = None) -> str | None:
    """Host `host`'s pool holds the image of release `box`|`inputs_hash` as `volumes` (kept with the
    entry); the release's version. An unknown release is registered when `marker` (its box's
    slurmlab.json) describes it, else nothing is recorded (None)."""
    key, volumes = f"{box}|{inputs_hash}", sorted(set(volumes))
    e = _load().get(key)
    if e is not None and set(volumes) <= set((e.get("hosts") or {}).get(host, ())):
        return e["version"]  # known already: no write (every fork on a host asks)
    registry_path().parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(registry_path()) + ".lock"):
        doc = _load()
        if key not in doc and marker is not None and marker.get("inputs_hash", "") == inputs_hash:
            _entry(doc, box, marker, False, time.time())
        if (e := doc.get(key)) is None:
            return None
        hosts = e.setdefault("hosts", {})
        hosts[host] = sorted({*hosts.get(host, ()), *volumes})
        _save(doc)
    return e["version"]


def forget_on_host(host: str, volumes=None) -> None:
    """Host `host`'s pool no longer holds `volumes` (None: any: the host left the lab)."""
    doc = _load()
    drop = None if volumes is None else set(volumes)
    if not any(host in (e.get("hosts") or {}) for e in doc.values()) or drop == set():
        return
    with FileLock(str(registry_path()) + ".lock"):
        doc = _load()
        for e in doc.values():
            hosts = e.get("hosts") or {}
            if host not in hosts:
                continue
            left = [] if drop is None else [v for v in hosts[host] if v not in drop]
            if left:
                hosts[host] = left
            else:
                del hosts[host]
            if not hosts:
                e.pop("hosts", None)
        _save(doc)


def on_host(host: str) -> dict[str, str]:
    """{volume of host `host`'s pool: the version of the release it holds}, as recorded."""
    return {v: e["version"] for e in _load().values() for v in (e.get("hosts") or {}).get(host, ())}


# ---------------------------------------------------------------- pure questions about a catalog
def of_box(releases: list[Release], box: str) -> Release | None:
    """The release a box name makes nodes from now (its available release)."""
    return next((r for r in releases if r.box == box and r.available), None)


def find(releases: list[Release], version: str | None, line: str | None = None) -> Release | None:
    return next((r for r in releases if r.version == version and (line is None or r.line == line)), None)


def newest(releases: list[Release], line: str) -> Release | None:
    mine = [r for r in releases if r.line == line and r.available]
    return max(mine, key=lambda r: version_key(r.version)) if mine else None


def newest_of(releases: list[Release], versions) -> Release | None:
    """The newest available release of the one line `versions` belong to (None: none of them known, or
    they are of several lines)."""
    lines = {r.line for v in versions if v and (r := find(releases, v)) is not None}
    return newest(releases, lines.pop()) if len(lines) == 1 else None


def status(releases: list[Release], current: Release | None) -> str | None:
    """HyperPod's ImageVersionStatus of a node on `current` (None: its release is not known)."""
    if current is None:
        return None
    newer = [r for r in releases if r.line == current.line and r.available
             and version_key(r.version) > version_key(current.version)]
    if any(r.security for r in newer):
        return "SecurityUpdateRequired"
    if newer:
        return "UpdateAvailable"
    here = find(releases, current.version, current.line)
    return "UpToDate" if here is not None and here.available else "EndOfLife"


def worst(statuses) -> str | None:
    """A group's or cluster's status: the most urgent of its nodes' (HyperPod aggregates them)."""
    got = [s for s in statuses if s]
    order = {"UpToDate": 0, "UpdateAvailable": 1, "SecurityUpdateRequired": 2, "EndOfLife": 3}
    return max(got, key=order.__getitem__) if got else None


# Slurm's major releases in order: a 9-month cycle until 24.05, a 6-month one since (YY.05, YY.11).
_MAJORS = ("20.02", "20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11")


def _series(slurm_version: str | None) -> int | None:
    """A Slurm major release's place in the order of major releases (None: not a Slurm version)."""
    m = re.match(r"(\d+)\.(\d+)", slurm_version or "")
    if not m:
        return None
    major = f"{int(m.group(1)):02d}.{int(m.group(2)):02d}"
    if major in _MAJORS:
        return _MAJORS.index(major)
    yy, mm = int(m.group(1)), int(m.group(2))
    if yy < 25:
        return None  # not a major release slurmlab knows
    return len(_MAJORS) + (yy - 25) * 2 + (1 if mm >= 11 else 0)


def slurm_step(from_version: str | None, to_version: str | None) -> str | None:
    """Why Slurm cannot go from `from_version` to `to_version` in place (None: it can). Slurm upgrades
    from the two previous major releases, and since 24.11 from the three previous ones (24.11 -> 26.05
    is allowed, 24.05 -> 25.11 is not); never downward (https://slurm.schedmd.com/upgrades.html)."""
    a, b = _series(from_version), _series(to_version)
    if a is None or b is None or a == b:
        return None
    if b < a:
        return f"Slurm {to_version} is older than {from_version}: Slurm does not downgrade in place"
    window = 3 if b >= _series("24.11") else 2
    if b - a > window:
        return (f"Slurm {from_version} -> {to_version} skips more Slurm releases than Slurm upgrades across in "
                f"place (the {window} previous major releases)")
    return None


def beside_controller(node_slurm: str | None, controller_slurm: str | None) -> str | None:
    """Why a node on Slurm `node_slurm` cannot serve a controller on `controller_slurm` (None: it can).
    slurmctld talks to slurmd of its own release and of the previous ones within Slurm's upgrade
    window, never to a newer slurmd."""
    a, b = _series(node_slurm), _series(controller_slurm)
    if a is None or b is None or a == b:
        return None
    if a > b:
        return (f"slurmd {node_slurm} would be newer than the controller's slurmctld {controller_slurm}: Slurm "
                "needs the controller at the newest release (update the controller first)")
    return slurm_step(node_slurm, controller_slurm)


def pinned_box(version: str, releases: list) -> str | None:
    """The box of a pinned release (None: the release is gone)."""
    r = find(releases, version)
    return r.box if r is not None and r.available else None
