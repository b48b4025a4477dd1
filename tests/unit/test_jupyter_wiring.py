"""Lab.Jupyter (issue 31) from the spec to the nodes, without a VM: the spec's checks and --jupyter, the
inventory's switch, the plays that include roles/jupyterhub on the login nodes, the box's wheels, and
which node `slurmlab open` and the console reach."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.box import recipe
from lab.configure import inventory as inv
from lab.configure.ansible import AnsibleConfigurer
from lab.control import jupyter
from lab.errors import LabError, SpecError, UsageError
from lab.spec import SpecInvalid, load_spec
from lab.store.db import ClusterRow, GroupRow, NodeRow
from lab.workflows import create
from tests.specs import BASE, LOGIN

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


def test_the_spec_takes_true_or_false_and_needs_a_login_group(tmp_path, lab_home):
    assert load_spec(_write(tmp_path, BASE + LOGIN + "Lab: {Jupyter: true}\n")).Lab.Jupyter is True
    with pytest.raises(SpecInvalid) as ei:
        load_spec(_write(tmp_path, BASE + LOGIN + "Lab: {Jupyter: 'yes'}\n"))
    assert "Lab.Jupyter: 'yes' is not true or false" in ei.value.message
    with pytest.raises(SpecInvalid) as ei:
        load_spec(_write(tmp_path, BASE + "Lab: {Jupyter: true}\n"))
    assert "JupyterHub runs on a login node and the cluster has none" in ei.value.message
    assert "NodeType: Login" in ei.value.message
    assert load_spec(_write(tmp_path, BASE + "Lab: {Jupyter: false}\n")).Lab.Jupyter is False


def test_the_command_line_flag_sets_it_and_is_checked_the_same_way(tmp_path, lab_home):
    with_login = _write(tmp_path, BASE + LOGIN)
    assert create.load(str(with_login), None, True).Lab.Jupyter is True
    assert create.load(str(with_login), 3, True).Lab.Users.Count == 3  # --users and --jupyter together
    assert create.load(str(with_login)).Lab is None or create.load(str(with_login)).Lab.Jupyter is None
    on = _write(tmp_path, BASE + LOGIN + "Lab: {Jupyter: true}\n")
    assert create.load(str(on), None, False).Lab.Jupyter is False  # --no-jupyter wins over the spec
    with pytest.raises((SpecError, UsageError)) as ei:
        create.load(str(_write(tmp_path, BASE)), None, True)
    assert "has none" in str(ei.value.args[0]) or "has none" in getattr(ei.value, "message", "")


def _rows(lab: dict, provider: str = "vagrant", login_phase: str = "running"):
    spec = {**yaml.safe_load(BASE + LOGIN), "Lab": lab}
    c = ClusterRow("jh", "arn:aws:sagemaker:us-east-1:000000000000:cluster/x", "InService", None, spec, provider, 1, 0.0)
    groups = [GroupRow("jh", "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "InService"),
              GroupRow("jh", "login", "ml.t3.medium", "Login", 1, [], 1, 768, "InService"),
              GroupRow("jh", "compute", "ml.c5.large", "Compute", 1, ["dev"], 1, 768, "InService")]
    nodes = [NodeRow("jh", "jh-controller-1", "controller", 1, "i-a", "10.0.0.10", "", "running"),
             NodeRow("jh", "jh-login-1", "login", 1, "i-b", "10.0.0.11", "", login_phase),
             NodeRow("jh", "jh-compute-1", "compute", 1, "i-c", "10.0.0.12", "", "running")]
    return c, groups, nodes


def test_the_inventory_switches_the_plays_on_for_the_login_nodes():
    c, groups, nodes = _rows({"Jupyter": True})
    ctx = AnsibleConfigurer("ssh").context(c, groups, nodes)
    assert ctx.jupyter is True
    assert inv.build(ctx)["all"]["vars"]["slurmlab_jupyter"] is True
    c.spec = {**c.spec, "Lab": {}}
    assert inv.build(AnsibleConfigurer("ssh").context(c, groups, nodes))["all"]["vars"]["slurmlab_jupyter"] is False
    # nodes.yml (a node's configure) and users.yml (users add/remove: the hub's allowed students) include it
    for playbook in ("nodes.yml", "users.yml"):
        plays = yaml.safe_load((ROOT / "playbooks" / playbook).read_text())
        hub = [p for p in plays if any(t.get("ansible.builtin.include_role", {}).get("name") == "jupyterhub"
                                       for t in p.get("tasks", []))]
        assert len(hub) == 1 and hub[0]["hosts"] == "slurm_login", playbook
        assert hub[0]["tasks"][0]["when"] == "slurmlab_jupyter | default(false) | bool"


def test_the_box_carries_the_wheels_and_they_are_part_of_its_inputs():
    assert "jupyterhub" in recipe.PACKAGES and "python3-pip" in recipe.PACKAGES
    assert any(w.startswith("batchspawner==") for w in recipe.WHEELS)
    assert all("==" in w for w in recipe.WHEELS)  # pinned: the same box from the same inputs
    r = recipe.default_recipe()
    from dataclasses import replace

    assert recipe.inputs_hash(r) != recipe.inputs_hash(replace(r, wheels=("jupyterlab==4.0.12",) + r.wheels[1:]))
    script = recipe.CUSTOMIZE_SCRIPT.read_text()
    assert 'WHEELS="${2:-}"' in script and "--no-index" in script


class _Store:
    def __init__(self, rows):
        self.c, self.g, self.n = rows

    def cluster(self, name):
        return self.c if name == self.c.name else None

    def groups(self, name):
        return self.g

    def nodes(self, name):
        return self.n


def test_the_hub_is_on_the_first_running_login_node_and_every_refusal_names_its_fix():
    assert jupyter.hub_node(_Store(_rows({"Jupyter": True})), "jh").name == "jh-login-1"
    assert jupyter.path("jh") == "/jh/" and jupyter.PORT == 8000
    for rows, words in ((_rows({}), "Lab.Jupyter: true"),
                        (_rows({"Jupyter": True}, provider="sim"), "simulated"),
                        (_rows({"Jupyter": True}, login_phase="configuring"), "no running login node")):
        with pytest.raises(LabError) as ei:
            jupyter.hub_node(_Store(rows), "jh")
        assert words in f"{ei.value.message} {ei.value.fix}"
    with pytest.raises(LabError, match="no cluster named"):
        jupyter.hub_node(_Store(_rows({})), "other")
