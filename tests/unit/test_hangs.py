"""Hung VMs (issue 45) on the sim provider, in virtual time: a VM whose guest agent stops answering while
libvirt says it runs is hung after HUNG_AFTER_S; NodeRecovery Automatic reboots it (one Warning event
naming what did not answer), and replaces it when it hangs again after that reboot; NodeRecovery None
shows it only, and an answer clears the mark. The controller and the login node are watched too (Slurm
watches only compute nodes)."""

from __future__ import annotations

import asyncio

from lab.engine.hangs import HUNG_AFTER_S, MESSAGE
from tests.simlab import SimLab, spec_text


def _events(lab, node: str) -> list[str]:
    return [e.description for e in lab.st.events("demo") if e.description.startswith(f"{node}: ")]


def _ready(lab) -> bool:
    return lab.full("demo") and lab.st.cluster("demo").status == "InService"


def test_a_hung_login_node_is_rebooted_and_answers_again(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text())
        await lab.run_until(lambda: _ready(lab))
        node, boots = "demo-login-1", lab.prov.vms["demo"]["demo-login-1"].boots
        lab.prov.hung[node] = False  # a reboot ends it
        t0 = lab.clock()
        await lab.run_until(lambda: lab.node(node).pending == "reboot" or lab.node(node).phase == "rebooting")
        assert HUNG_AFTER_S <= lab.clock() - t0 <= HUNG_AFTER_S + 35  # two asks apart, plus the pass
        ev = [e for e in _events(lab, node) if MESSAGE in e]
        assert len(ev) == 1 and "libvirt says it runs, its guest agent does not answer (simulated hang)" in ev[0], ev
        assert ev[0].endswith("rebooting it"), ev
        await lab.run_until(lambda: _ready(lab) and lab.node(node).phase == "running" and not lab.node(node).pending)
        assert lab.prov.vms["demo"][node].boots == boots + 1 and node not in lab.prov.hung
        await lab.ticks(int(2 * HUNG_AFTER_S))
        assert len([e for e in _events(lab, node) if MESSAGE in e]) == 1  # answers now: nothing more
        await lab.finish()

    asyncio.run(go())


def test_a_node_hung_again_after_its_reboot_is_replaced(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text())
        await lab.run_until(lambda: _ready(lab))
        node = "demo-compute-1"
        first_id = lab.node(node).instance_id
        lab.prov.hung[node] = True  # survives the reboot
        await lab.run_until(lambda: any("replacing it" in e for e in _events(lab, node)), max_ticks=800)
        ev = [e for e in _events(lab, node) if MESSAGE in e]
        assert ev[0].endswith("rebooting it") and ev[0].startswith(f"{node}: hung for "), ev
        assert ev[1].startswith(f"{node}: hung again after its reboot for ") and ev[1].endswith("replacing it"), ev
        await lab.run_until(lambda: _ready(lab) and lab.node(node).phase == "running" and not lab.node(node).pending)
        assert lab.node(node).instance_id != first_id and node not in lab.prov.hung
        await lab.finish()

    asyncio.run(go())


def test_with_node_recovery_none_a_hung_node_is_shown_only_and_cleared_when_it_answers(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(recovery="None"))
        await lab.run_until(lambda: _ready(lab))
        node = "demo-controller-1"
        boots = lab.prov.vms["demo"][node].boots
        lab.prov.hung[node] = True
        await lab.run_until(lambda: lab.node(node).message.startswith(MESSAGE))
        await lab.ticks(int(2 * HUNG_AFTER_S))
        ev = [e for e in _events(lab, node) if MESSAGE in e]
        assert len(ev) == 1 and "NodeRecovery None: shown, not recovered" in ev[0], ev
        assert "slurmlab batch-reboot-cluster-nodes demo demo-controller-1" in ev[0]
        assert lab.node(node).pending is None and lab.prov.vms["demo"][node].boots == boots
        del lab.prov.hung[node]
        await lab.run_until(lambda: lab.node(node).message == "")
        assert _events(lab, node)[-1] == f"{node}: answers again"
        await lab.finish()

    asyncio.run(go())


def test_the_agent_ping_names_the_running_domains_whose_agent_is_silent(monkeypatch):
    """lab/providers/agent.py silent(): only running domains are asked; a missing or paused one is left to
    observe(); a silent agent is named with what libvirt said."""
    import libvirt

    from lab.providers import agent

    class Dom:
        def __init__(self, name, code):
            self.name, self.code = name, code

        def state(self):
            return self.code, 0

    doms = {"a": Dom("a", libvirt.VIR_DOMAIN_RUNNING), "b": Dom("b", libvirt.VIR_DOMAIN_RUNNING),
            "c": Dom("c", libvirt.VIR_DOMAIN_PAUSED), "e": Dom("e", libvirt.VIR_DOMAIN_RUNNING)}

    class Conn:
        def lookupByName(self, name):  # noqa: N802 - libvirt's name
            if name not in doms:
                raise libvirt.libvirtError("no domain")
            return doms[name]

    asked = []

    def command(dom, execute, timeout=10, **kw):
        asked.append((dom.name, execute, timeout))
        if dom.name == "b":
            raise agent.AgentError("guest-ping: Guest agent is not responding")
        if dom.name == "e":  # no channel (a cold boot before the Vagrantfile had one): nothing to judge it by
            raise agent.AgentError("guest-ping: argument unsupported: QEMU guest agent is not configured")

    monkeypatch.setattr(agent, "command", command)
    assert agent.silent(Conn(), ["a", "b", "c", "d", "e"]) == {
        "b": "libvirt says it runs, its guest agent does not answer (guest-ping: Guest agent is not responding)"}
    assert asked == [("a", "guest-ping", agent.PING_S), ("b", "guest-ping", agent.PING_S), ("e", "guest-ping", agent.PING_S)]


def test_work_under_way_on_a_silent_node_does_not_start_its_count_again():
    """Slurm's ladder restarts slurmd over ssh on a hung compute node (a task: the node is busy); the node
    stays silent meanwhile, and is hung as soon as that work ends (CI run D: the count started again, and
    the ladder's reboot came first, with no word of a hang)."""
    from types import SimpleNamespace as NS

    from lab.engine.hangs import HangWatch

    events, updates, now = [], [], {"t": 0.0}
    store = NS(update_node=lambda c, n, **kw: updates.append((n, kw)),
               add_event=lambda c, kind, level, text, **kw: events.append(text))
    rec = NS(store=store, clock=lambda: now["t"], group_failed=lambda *a: None)
    w = HangWatch(rec, io=None, tasks=None)
    c = NS(name="demo", status="InService", spec={"NodeRecovery": "Automatic"})
    node = NS(name="demo-compute-1", grp="compute", phase="running", pending=None, message="")
    silent = {"demo-compute-1": "libvirt says it runs, its guest agent does not answer (x)"}
    w._show(c, [node], set(), 0.0, [node.name], silent)
    now["t"] = 20.0
    w._show(c, [node], {node.name}, 20.0, [node.name], silent)  # a slurmd restart under way
    assert updates == [] and events == []
    now["t"] = 31.0
    w._show(c, [node], set(), 31.0, [node.name], silent)
    assert updates and updates[0][1]["pending"] == "reboot", updates
    assert events == ["demo-compute-1: hung for 31 s: libvirt says it runs, its guest agent does not answer (x): rebooting it"]
