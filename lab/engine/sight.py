"""Whether the engine can see a cluster's VMs.

When the provider cannot be asked (libvirtd stopped: `ProviderUnreachable`, or any other error
from `observe`), the engine acts on nothing for that cluster: with no observation, every VM would
look gone. Instead the cluster's stored state is marked stale (`ClusterRow.unobserved_since` and
`unobserved_reason`, which DescribeCluster and ListClusterNodes show), one Error event says why and
how to fix it, the log gets one line, and the engine asks again with backoff (1 s doubling to 30 s).
When the provider answers again, the mark goes with an Info event and the engine carries on, no
restart needed. A new engine that finds the mark keeps its time and does not repeat the event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from lab.osutil import iso_seconds
from lab.providers.base import ProviderUnreachable
from lab.store.db import ClusterRow, Store

log = logging.getLogger(__name__)

RETRY_BASE_S = 1.0
RETRY_MAX_S = 30.0


@dataclass
class Blind:
    since: float
    reason: str
    failures: int = 0
    next_try: float = 0.0


def stale_note(c: ClusterRow) -> str | None:
    """What DescribeCluster says of a cluster whose VMs the lab cannot see (None: it can)."""
    if c.unobserved_since is None:
        return None
    return (f"stale: the lab cannot observe this cluster's VMs since {iso_seconds(c.unobserved_since)} "
            f"({c.unobserved_reason}); the statuses shown are from then. Fix: slurmlab host up, then slurmlab doctor")


class Sight:
    def __init__(self, store: Store, clock: Callable[[], float]):
        self.store = store
        self.clock = clock
        self.blind: dict[str, Blind] = {}

    def waiting(self, cluster: str) -> bool:
        """True while the backoff after a failed observation runs: do not ask (or act) yet."""
        b = self.blind.get(cluster)
        return b is not None and self.clock() < b.next_try

    def blind_since(self, cluster: str) -> float | None:
        """Since when the cluster's VMs cannot be observed (None: they can)."""
        b = self.blind.get(cluster)
        return b.since if b else None

    def lost(self, c: ClusterRow, e: Exception) -> None:
        """`observe` failed: mark the cluster stale (once), say so (once), back off."""
        now = self.clock()
        reason = str(e) or type(e).__name__
        fix = e.fix if isinstance(e, ProviderUnreachable) else "slurmlab doctor"
        b = self.blind.get(c.name)
        if b is None:
            b = self.blind[c.name] = Blind(since=c.unobserved_since or now, reason=reason)
            if c.unobserved_since is None:
                self.store.update_cluster(c.name, unobserved_since=b.since, unobserved_reason=reason)
                self.store.add_event(c.name, "Cluster", "Error",
                                     f"{reason}: the lab cannot observe the VMs of cluster {c.name}; it shows their "
                                     f"state as of {iso_seconds(b.since)} (stale) and changes nothing until it can. Fix: {fix}")
            log.warning("cluster %s: cannot observe its VMs: %s (asking again with backoff; fix: %s)", c.name, reason, fix)
        elif reason != b.reason:
            b.reason = reason
            self.store.update_cluster(c.name, unobserved_reason=reason)
            log.warning("cluster %s: still cannot observe its VMs: %s", c.name, reason)
        b.failures += 1
        b.next_try = now + min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (b.failures - 1))

    def forget(self, c: ClusterRow) -> None:
        """The cluster moved to another host (lab/engine/hostloss.py): the mark goes without an "observed
        again" event (its VMs were not seen; the move has its own event)."""
        self.blind.pop(c.name, None)
        self.store.update_cluster(c.name, unobserved_since=None, unobserved_reason=None)
        c.unobserved_since = c.unobserved_reason = None

    def seen(self, c: ClusterRow) -> None:
        """`observe` answered: clear a stale mark (this engine's or a previous one's)."""
        self.blind.pop(c.name, None)
        if c.unobserved_since is None:
            return
        gap = self.clock() - c.unobserved_since
        self.store.update_cluster(c.name, unobserved_since=None, unobserved_reason=None)
        self.store.add_event(c.name, "Cluster", "Info",
                             f"the VMs of cluster {c.name} are observed again (after {gap:.0f} s without)")
        log.info("cluster %s: its VMs are observed again after %.0f s", c.name, gap)
        c.unobserved_since = c.unobserved_reason = None
