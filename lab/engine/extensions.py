"""The engine keeps each cluster extension as its row wishes (docs/adr/0017-cluster-extensions.md):
`ExtensionWork`, a part of lab.engine.engine.Engine.

Each pass, for each extension of a cluster (one task at a time per extension, key `extension:NAME`):
- Creating / Updating: applied (`extension_apply`) to every running node; Active when every node
  has it, Degraded when some do, CreateFailed / UpdateFailed when none does.
- Active / Degraded: applied to running nodes it is not on yet (a node that joined, was forked or
  booted, or replaced; nodes that stopped running leave `installed`); nodes whose apply failed are
  retried once a scrape interval. Every `scrapeIntervalSeconds` a probe (`extension_probe`):
  members that do not answer make it Degraded with one Health issue (Code ExtensionUnhealthy, the
  nodes named in Message: the model has no node field); every member answering makes it Active
  again; a node is judged only GRACE_SCRAPES scrape intervals after its install (the controller's
  collector may scrape it before its exporter, started in the same run, listens). The probe's metrics
  sample is kept (Store.add_extension_sample, the newest 120).
- Deleting: removed (`extension_remove`) from the nodes it is on, then the row goes; when no node
  could be rid of it, DeleteFailed.
A request that changed the row while a task ran (lab/control/extensions.py bumps `modified_at`)
wins: the task then only adds the nodes it installed on, and the next pass acts on the new wish.
"""

from __future__ import annotations

import logging

from lab.configure.base import Extension, Probe
from lab.engine.backends import Backends
from lab.engine.bookkeeping import Records
from lab.engine.states import Phase, Status
from lab.engine.tasks import Tasks
from lab.spec.extensions import scrape_interval
from lab.store.db import ClusterRow, ExtensionRow

log = logging.getLogger(__name__)

SHOWN_NODES = 20  # nodes named in one health issue's Message (1024 characters at most)
GRACE_SCRAPES = 2  # scrape intervals after its install before a node that does not answer counts


def issue(code: str, what: str, nodes: dict[str, str]) -> dict:
    """One Health issue: the nodes with the same problem, named (capped) with the first one's why."""
    names = sorted(nodes)
    shown = ", ".join(names[:SHOWN_NODES]) + (f" and {len(names) - SHOWN_NODES} more" if len(names) > SHOWN_NODES else "")
    why = nodes[names[0]]
    return {"Code": code, "Message": f"{what} on {shown} ({why})"[:1024], "NodeCount": len(names)}


def health_issues(failed: dict[str, str], unhealthy: dict[str, str]) -> list[dict]:
    out = []
    if unhealthy:
        out.append(issue("ExtensionUnhealthy", "the extension does not answer", unhealthy))
    if failed:
        out.append(issue("InternalFailure", "the extension could not be installed or removed", failed))
    return out


class ExtensionWork:
    def __init__(self, rec: Records, io: Backends, tasks: Tasks):
        self.rec, self.io, self.tasks = rec, io, tasks
        self.store, self.clock = rec.store, rec.clock
        # (cluster, extension, node) -> when an apply last finished there: a node is not judged by a
        # probe until the collector has had GRACE_SCRAPES scrapes of it (Prometheus on the controller
        # may scrape a node before its exporter, installed in the same run, listens)
        self.applied_at: dict[tuple[str, str, str], float] = {}

    def step(self, c: ClusterRow, groups, nodes) -> None:
        if c.status in (Status.DELETING, Status.FAILED):
            return  # a deleted cluster's rows go with it (Store.delete_cluster)
        exts = self.store.extensions(c.name)
        if not exts:
            return
        conf = self.io.configurer_for(c)
        if conf is None:
            return
        types = {g.name: g.node_type for g in groups}
        running = [n.name for n in nodes if n.phase == Phase.RUNNING]
        controller = next((n.name for n in nodes if types.get(n.grp) == "Controller" and n.phase == Phase.RUNNING), None)
        ctx = None
        for e in exts:
            key = f"extension:{e.name}"
            if self.tasks.active(c.name, key):
                continue
            job = self._job(c, e, conf, running, controller)
            if job is not None:
                if ctx is None:
                    ctx = self.io.context_from(c, groups, nodes)
                self.tasks.start(c.name, key, job(ctx))

    def _job(self, c: ClusterRow, e: ExtensionRow, conf, running: list[str], controller: str | None):
        """What to do for `e` now: a coroutine function of the configurer's context, or None."""
        now = self.clock()
        due = e.probed_at is None or now - e.probed_at >= scrape_interval(e.settings)
        here = set(running)
        if e.status == "Deleting":
            targets = [n for n in e.installed if n in here]
            if not due and e.failed:
                return None  # a failed removal is tried again once a scrape interval
            ext = self._ext(e, running, controller or "")
            self.store.update_extension(c.name, e.name, probed_at=now)
            return lambda ctx: self._remove(c.name, e, conf, ext, targets, ctx)
        if controller is None:
            return None  # nothing to collect with (the controller is not up, or being replaced)
        ext = self._ext(e, running, controller)
        if e.status in ("Creating", "Updating"):
            return lambda ctx: self._apply(c.name, e, conf, ext, running, ctx, full=True)
        if e.status not in ("Active", "Degraded"):
            return None  # *Failed: until a request (an Update retries)
        kept = [n for n in e.installed if n in here]
        if kept != e.installed:  # nodes that stopped running (deleted, rebooting, replaced) lose it
            self.store.update_extension(c.name, e.name, installed=kept)
            e.installed = kept
        new = [n for n in running if n not in kept and (n not in e.failed or due)]
        if not new and not due:
            return None
        if due:
            self.store.update_extension(c.name, e.name, probed_at=now)
        probe = self._ext(e, [n for n in running if n in kept or n in new], controller) if due else None
        return lambda ctx: self._maintain(c.name, e, conf, ext, new, probe, ctx)

    @staticmethod
    def _ext(e: ExtensionRow, members: list[str], controller: str) -> Extension:
        return Extension(e.name, e.version, e.settings, tuple(members), controller)

    # ------------------------------------------------------------------ tasks
    async def _maintain(self, cluster: str, e: ExtensionRow, conf, ext: Extension, new: list[str],
                        probe: Extension | None, ctx) -> None:
        if new:
            await self._apply(cluster, e, conf, ext, new, ctx, full=False)
        if probe is not None:
            await self._probe(cluster, e, conf, probe, ctx)

    async def _apply(self, cluster: str, e: ExtensionRow, conf, ext: Extension, targets: list[str], ctx, *,
                     full: bool) -> None:
        try:
            failed = dict(await conf.extension_apply_async(ctx, ext, targets) or {})
        except Exception as x:  # noqa: BLE001 - every target failed, the reason shown
            failed = {n: str(x) or type(x).__name__ for n in targets}
        ok = [n for n in targets if n not in failed]
        done = self.clock()
        for n in ok:
            self.applied_at[(cluster, e.name, n)] = done
        now = self.store.extension(cluster, e.name)
        if now is None:
            return
        if now.modified_at != e.modified_at:  # a request came meanwhile: its wish next pass
            self.store.update_extension(cluster, e.name, installed=sorted(set(now.installed) | set(ok)))
            return
        installed = sorted(set(ok) | (set() if full else set(now.installed)))
        fails = {**({} if full else {k: v for k, v in now.failed.items() if k not in targets}), **failed}
        unhealthy = {} if full else now.unhealthy
        if full and not ok:
            status = "CreateFailed" if e.status == "Creating" else "UpdateFailed"
        else:
            status = "Degraded" if fails or unhealthy else "Active"
        message = "; ".join(f"{n}: {w}" for n, w in sorted(failed.items()))[:1000]
        self.store.update_extension(cluster, e.name, installed=installed, failed=fails, unhealthy=unhealthy,
                                    issues=health_issues(fails, unhealthy), status=status, message=message)
        if ok and not full:
            self._event(cluster, "Info", f"extension {e.name} {e.version} installed on {', '.join(ok)}")
        self._moved(cluster, e, now.status, status, fails, unhealthy)

    async def _probe(self, cluster: str, e: ExtensionRow, conf, ext: Extension, ctx) -> None:
        try:
            got = await conf.extension_probe_async(ctx, ext, self.rec.faults)
        except Exception as x:  # noqa: BLE001 - the collector itself does not answer
            got = Probe(unhealthy={ext.controller: f"the probe failed: {x}"})
        if got is None:
            return
        if got.sample is not None:
            self.store.add_extension_sample(cluster, got.sample)
        now = self.store.extension(cluster, e.name)
        if now is None or now.modified_at != e.modified_at or now.status not in ("Active", "Degraded"):
            return
        grace = GRACE_SCRAPES * scrape_interval(now.settings)
        unhealthy = {n: w for n, w in got.unhealthy.items() if n in ext.members
                     and self.clock() - self.applied_at.get((cluster, e.name, n), float("-inf")) >= grace}
        status = "Degraded" if unhealthy or now.failed else "Active"
        self.store.update_extension(cluster, e.name, unhealthy=unhealthy, status=status,
                                    issues=health_issues(now.failed, unhealthy))
        self._moved(cluster, e, now.status, status, now.failed, unhealthy)

    async def _remove(self, cluster: str, e: ExtensionRow, conf, ext: Extension, targets: list[str], ctx) -> None:
        failed: dict[str, str] = {}
        if targets:
            try:
                failed = dict(await conf.extension_remove_async(ctx, ext, targets) or {})
            except Exception as x:  # noqa: BLE001
                failed = {n: str(x) or type(x).__name__ for n in targets}
        now = self.store.extension(cluster, e.name)
        if now is None or now.status != "Deleting":
            return
        if not failed:
            self.store.delete_extension(cluster, e.name)
            self._event(cluster, "Info", f"extension {e.name} removed from every node"
                        + (f" ({', '.join(targets)})" if targets else ""))
            return
        removed = [n for n in targets if n not in failed]
        status = "Deleting" if removed else "DeleteFailed"
        self.store.update_extension(cluster, e.name, installed=[n for n in now.installed if n not in removed],
                                    failed=failed, status=status, issues=health_issues(failed, {}),
                                    message="; ".join(f"{n}: {w}" for n, w in sorted(failed.items()))[:1000])
        self._event(cluster, "Error", f"extension {e.name}: not removed from {', '.join(sorted(failed))} "
                    f"({next(iter(failed.values()))})" + ("; tried again" if removed else "; DeleteFailed"))

    # ------------------------------------------------------------------ events
    def _event(self, cluster: str, level: str, text: str) -> None:
        self.store.add_event(cluster, "Cluster", level, text[:500])

    def _moved(self, cluster: str, e: ExtensionRow, was: str, now: str, failed: dict, unhealthy: dict) -> None:
        if was == now:
            return
        if now == "Active":
            again = was == "Degraded"
            self._event(cluster, "Info", f"extension {e.name} {e.version} is Active"
                        + (" again: every node answers" if again else ""))
        elif now == "Degraded":
            said = "; ".join(i["Message"] for i in health_issues(failed, unhealthy))
            self._event(cluster, "Warning", f"extension {e.name} is Degraded: {said}")
        else:
            self._event(cluster, "Error", f"extension {e.name} is {now}: "
                        + "; ".join(f"{n}: {w}" for n, w in sorted(failed.items())))
