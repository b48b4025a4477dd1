"""What the roles report as "slurmlab warning: ..." (a boot-time setup that failed, a munge key that
was replaced) reaches the node's events and status message."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from lab.configure.runner import _warnings
from lab.configure.sim import SimConfigurer
from tests.simlab import SimLab, spec_text


def test_warnings_are_read_from_debug_tasks_only():
    events = [
        {"event": "runner_on_ok", "event_data": {"host": "demo-login-1", "res": {
            "msg": "slurmlab warning: boot-time setup on demo-login-1: failed: slurmlab.node: role 'X' is not ..."}}},
        {"event": "runner_on_ok", "event_data": {"host": "demo-login-1", "res": {"msg": "an ordinary debug line"}}},
        {"event": "runner_on_failed", "event_data": {"host": "h", "res": {"msg": "slurmlab warning: not from a failure"}}},
        {"event": "runner_on_ok", "event_data": {"host": "h", "res": {"msg": ["not", "a", "string"]}}},
    ]
    assert _warnings(events) == ["demo-login-1: boot-time setup on demo-login-1: failed: slurmlab.node: role 'X' is not ..."]


class WarningConfigurer(SimConfigurer):
    async def configure_async(self, ctx, node, node_type):
        await super().configure_async(ctx, node, node_type)
        if node == "demo-login-1":
            return [SimpleNamespace(warnings=[f"{node}: boot-time setup on {node}: failed: bad credential; "
                                              "Ansible configures the node instead"])]
        return []


def test_a_warning_becomes_an_event_and_the_node_says_why(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.conf = WarningConfigurer(sleep=lab.clock.sleep)
        lab.eng = lab.new_engine()
        lab.create(spec_text(computes=1, logins=1))
        await lab.run_until(lambda: lab.full())
        login = lab.node("demo-login-1")
        assert login.phase == "running" and "bad credential" in login.message
        warn = [e for e in lab.st.events("demo", limit=1000) if e.level == "Warning" and e.node == "demo-login-1"]
        assert len(warn) == 1 and "boot-time setup on demo-login-1: failed: bad credential" in warn[0].description
        assert lab.node("demo-compute-1").message == ""
        await lab.finish()

    asyncio.run(go())
