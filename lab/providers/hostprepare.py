"""A host made ready before its first class (`slurmlab host prepare NAME`, issue 47): every warm-start
template of this machine that its VMs can fork from goes up to its pool now, so that its first nodes
fork at once instead of waiting for the upload (lab/providers/hosttemplates.py, ADR 0026).

On this machine the templates are built by `make up` / `box build` before any student comes; the
remote's copies are the same step for that host. Which templates: every complete plain and role
template of the box (the lab's default box unless told) whose domain type is the host's (a KVM host
forks none of a TCG machine's templates), of the shapes asked for (all by default), plain ones first
(a role template's chain shares their files).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from lab.providers import hosttemplates
from lab.providers import roletemplates as rtpl
from lab.providers import templates as tpl


def candidates(driver: str, box: str, shapes: Collection[str] = ()) -> list[tpl.Template]:
    """The complete templates of this machine of `box` with domain type `driver` (and one of `shapes`,
    e.g. 1cpu-768mib, when given): plain ones, then role ones."""
    def wanted(t: dict) -> bool:
        return (t["driver"] == driver and t["box"] == box
                and (not shapes or str(tpl.Shape(t["cpus"], t["memory_mib"])) in shapes))

    plain = [tpl.Template(t["key"], tpl.root() / t["key"]) for t in tpl.listing() if wanted(t)]
    roles = [rtpl.RoleTemplate(t["key"], rtpl.root() / t["key"], t["role"]) for t in rtpl.listing() if wanted(t)]
    return plain + roles


def prepare(host, box: str, shapes: Collection[str] = (), progress: Callable[[str], None] = lambda s: None) -> dict:
    """Upload the templates of `box` (of `shapes` when given) that `host` can fork from into its pool
    (those there already are kept). Returns
    {"host", "driver", "templates": [{"template", "role", "seconds"}], "seconds", "bytes"}; raises
    TemplateError (and libvirt's error when the host does not answer)."""
    from lab.host import caps

    t0 = time.monotonic()
    conn = host.connect()
    try:
        driver = caps.domain_type(host, conn)
        rows = []
        for t in candidates(driver, box, shapes):
            role = t.role if isinstance(t, rtpl.RoleTemplate) else None
            progress(f"{t.key}{' (' + role + ')' if role else ''}")
            t1 = time.monotonic()
            hosttemplates.ensure(host, conn, t)
            rows.append({"template": t.key, "role": role, "seconds": round(time.monotonic() - t1, 1)})
        held = sum(v["bytes"] for v in hosttemplates.listing(conn, host.pool))
    finally:
        conn.close()
    return {"host": host.name, "driver": driver, "templates": rows, "seconds": round(time.monotonic() - t0, 1),
            "bytes": held}
