"""create-cluster's path: the spec with --users, the box and the host for real VMs, a capacity
file, then the cluster's record (the engine builds it)."""

from __future__ import annotations

from lab.engine.commands import PROVIDERS
from lab.errors import UsageError
from lab.store.db import ClusterRow, Store


def load(spec_path: str, users: int | None = None):
    """The spec of `spec_path` with --users applied (Lab.Users.Count), checked like the spec's own Lab.Users."""
    from lab.spec import load_spec, with_users
    from lab.spec.rules import user_count_problem

    sp = load_spec(spec_path)
    if users is None:
        return sp
    bad = user_count_problem(users)
    if bad:
        raise UsageError(f"--users (Lab.Users.Count): {bad[0]}", bad[1])
    return with_users(sp, users)


def check_provider(provider: str) -> None:
    if provider not in PROVIDERS:
        raise UsageError(f"--provider: unknown provider '{provider}'", "use vagrant (real VMs) or sim (simulated VMs)")


def create(sp, provider: str = "vagrant", capacity_file: str | None = None) -> tuple[Store, ClusterRow]:
    """Check everything that can be checked before the host changes (box, capacity file, name),
    then set the host up (real VMs), apply the capacity file, record the cluster, start the engine.
    Returns the store and the cluster's row."""
    from lab import box, capacity
    from lab.engine import clusters, daemon
    from lab.host import libvirtd

    check_provider(provider)
    if provider == "vagrant":
        box.require(sp.box)
    cap = capacity.load(capacity_file) if capacity_file else None  # validate before anything changes
    st = daemon.store()
    clusters.check_new(st, sp.name)  # the name clash (or the lab's limit) before touching the host
    if provider == "vagrant":
        libvirtd.up()
    if cap is not None:
        capacity.apply(st, cap)
    return st, clusters.create(st, sp, provider=provider)
