"""The engine's running tasks: one asyncio task per (cluster, key) at a time, and the blocking calls
still in worker threads (lab/providers/base.py `in_thread`). Every part that starts work starts it
here, so that `busy`, `cancel` and `drain` see all of it."""

from __future__ import annotations

import asyncio
import time

from lab.providers.base import threads_running


class Tasks:
    def __init__(self) -> None:
        self.running: dict[tuple[str, str], asyncio.Task] = {}

    def prune(self) -> None:
        """Forget the tasks that ended (once a pass)."""
        self.running = {k: t for k, t in self.running.items() if not t.done()}

    def start(self, cluster: str, key: str, coro) -> None:
        """`coro` as the cluster's task `key` (one at a time per key: a second is dropped)."""
        if self.active(cluster, key):
            coro.close()
            return
        self.running[(cluster, key)] = asyncio.create_task(coro, name=f"{cluster}:{key}")

    def active(self, cluster: str, key: str) -> bool:
        t = self.running.get((cluster, key))
        return t is not None and not t.done()

    def keys(self, cluster: str) -> set[str]:
        """The cluster's tasks in flight, and "io" while a blocking call of it runs in a thread."""
        out = {key for (c, key), t in self.running.items() if c == cluster and not t.done()}
        if threads_running(cluster) > 0:
            out.add("io")
        return out

    def any_of(self, cluster: str) -> bool:
        """Whether the cluster has a task recorded this pass (done or not)."""
        return any(c == cluster for c, _ in self.running)

    async def cancel(self, cluster: str, keep: str | None = None) -> None:
        mine = [t for (c, k), t in self.running.items() if c == cluster and k != keep and not t.done()]
        for t in mine:
            t.cancel()
        await asyncio.gather(*mine, return_exceptions=True)

    async def drain(self) -> None:
        """Cancel in-flight work (engine shutdown); the store keeps enough to resume."""
        for t in self.running.values():
            t.cancel()
        await asyncio.gather(*self.running.values(), return_exceptions=True)

    @staticmethod
    async def wait_threads(cluster: str, limit: float = 1800) -> None:
        """Until no blocking call of the cluster is in flight (a thread cannot be cancelled)."""
        t0 = time.monotonic()
        while threads_running(cluster) > 0 and time.monotonic() - t0 < limit:
            await asyncio.sleep(0.2)
