"""create-cluster's path: the spec with --users, the box and the host for real VMs, a capacity
file, then the cluster's record (the engine builds it)."""

from __future__ import annotations

from lab.errors import UsageError
from lab.providers import registry
from lab.store.db import ClusterRow, Store


def load(spec_path: str, users: int | None = None, jupyter: bool | None = None):
    """The spec of `spec_path` with --users applied (Lab.Users.Count), checked like the spec's own Lab.Users,
    and --jupyter/--no-jupyter (Lab.Jupyter)."""
    from lab.spec import load_spec, with_lab, with_users
    from lab.spec.rules import user_count_problem

    sp = load_spec(spec_path)
    if users is not None:
        bad = user_count_problem(users)
        if bad:
            raise UsageError(f"--users (Lab.Users.Count): {bad[0]}", bad[1])
        sp = with_users(sp, users)
    if jupyter is not None:
        sp = with_lab(sp, {"Jupyter": jupyter})
    return sp


def create(sp, provider: str = registry.DEFAULT, capacity_file: str | None = None) -> tuple[Store, ClusterRow]:
    """create-cluster: the capacity file checked before anything changes, then the one create
    (lab/control/commands.py: the name, the provider's host set-up, the record, and the capacity file
    applied in the same transaction), then the engine. Returns the store and the cluster's row."""
    from lab import capacity
    from lab.control import clusters
    from lab.engine import daemon

    cap = capacity.load(capacity_file) if capacity_file else None  # validate before anything changes
    st = daemon.store()
    row = clusters.create(st, sp, provider=provider, admit=(lambda _: capacity.apply(st, cap)) if cap else None)
    return st, row
