"""The real sagemaker-observability extension without a VM: the Slurm exporter
(roles/observability/files/slurm_exporter.py) on `sinfo --json` / `squeue --json` recorded on a
real cluster (tests/unit/data/slurm-*.json, Slurm 24.11.5: one compute node running user01's job,
user02's pending), the probe's parsing (lab/configure/extensions.py) on Prometheus 2.53's answers
recorded on the same cluster (tests/unit/data/prometheus-probe*.json, with a second compute node), the role's variables from an
Extension and the files the role renders from them (ansible-core itself, a local play), and
AnsibleConfigurer's extension methods with the playbook run faked.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml

from lab.configure import ansible as ansible_conf
from lab.configure import extensions as ex
from lab.configure.base import Extension
from lab.configure.runner import PlaybookFailed, PlaybookResult
from lab.spec.extensions import settings
from tests.unit.test_roles import INVENTORY, _ansible_tool, _env

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
ROLE = ROOT / "roles" / "observability"


def _exporter():
    spec = importlib.util.spec_from_file_location("slurm_exporter", ROLE / "files" / "slurm_exporter.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


se = _exporter()
SINFO = json.loads((DATA / "slurm-sinfo-alloc.json").read_text())
SQUEUE = json.loads((DATA / "slurm-squeue.json").read_text())
PROBE = json.loads((DATA / "prometheus-probe.json").read_text())
PROBE_ONCE = json.loads((DATA / "prometheus-probe-once.json").read_text())
PROBE_DOWN = json.loads((DATA / "prometheus-probe-down.json").read_text())
MEMBERS = ("obs-compute-1", "obs-compute-2", "obs-controller-1")


def ext(config: dict | None = None, members=MEMBERS, version="1.1.0") -> Extension:
    return Extension("sagemaker-observability", version, settings(config or {}), tuple(members), "obs-controller-1")


ADVANCED = {"metricsProvider": {"slurmMetrics": {"level": "ADVANCED"}, "nodeMetrics": {"level": "ADVANCED"}},
            "scrapeIntervalSeconds": 15}


# ------------------------------------------------------------------ the Slurm exporter
def test_exporter_reads_the_recorded_slurm_json():
    states, cpus, mem_total, parts = se.parse_sinfo(SINFO)
    assert states == {"obs-compute-1": "allocated"}
    assert cpus == {"allocated": 1, "total": 1}
    assert mem_total == 576 and parts == ["dev"]  # RealMemory=576
    assert se.parse_squeue(SQUEUE) == [  # the running job got all of the node's memory (no --mem)
        {"state": "running", "partitions": ["dev"], "user": "user01", "memory_mib": 576},
        {"state": "pending", "partitions": ["dev"], "user": "user02", "memory_mib": 0}]


def test_two_nodes_in_one_sinfo_line_and_memory_from_the_jobs():
    """Recorded with two allocated nodes: sinfo groups them in one line whose CPUs are sums but whose
    memory.allocated (100) is not (576 + 100 by scontrol): the jobs' allocations give 676."""
    sinfo = json.loads((DATA / "slurm-sinfo-two.json").read_text())
    assert len(sinfo["sinfo"]) == 1 and sinfo["sinfo"][0]["memory"]["allocated"] == 100
    states, cpus, mem_total, parts = se.parse_sinfo(sinfo)
    assert states == {"obs-compute-1": "allocated", "obs-compute-2": "allocated"}
    assert cpus == {"allocated": 2, "total": 2} and mem_total == 1152
    jobs = se.parse_squeue(json.loads((DATA / "slurm-squeue-two.json").read_text()))
    s = se.summary(states, cpus, mem_total, parts, jobs, per_user=False)
    assert s["memory_mib"] == {"allocated": 676, "total": 1152}
    assert s["jobs"] == {"running": 2, "pending": 0} and s["nodes"]["allocated"] == 2


@pytest.mark.parametrize("flags,state", [
    (["IDLE"], "idle"), (["MIXED"], "mixed"), (["ALLOCATED"], "allocated"),
    (["IDLE", "DRAIN"], "drain"), (["ALLOCATED", "DRAIN"], "drain"), (["DOWN", "NOT_RESPONDING"], "down"),
    (["IDLE", "NOT_RESPONDING", "DOWN"], "down"), (["FUTURE"], "other"), ([], "other"),
])
def test_node_states_are_the_sample_s_six(flags, state):
    assert se.node_state(flags) == state


def test_a_node_in_two_partitions_counts_once():
    line = SINFO["sinfo"][0]
    twice = {"sinfo": [line, {**line, "partition": {**line["partition"], "name": "batch"}}]}
    states, cpus, mem_total, parts = se.parse_sinfo(twice)
    assert states == {"obs-compute-1": "allocated"} and cpus["total"] == 1 and mem_total == 576
    assert parts == ["dev", "batch"]


def test_summary_counts_jobs_by_state_partition_and_user_only_when_asked():
    states, cpus, mem_total, parts = se.parse_sinfo(SINFO)
    jobs = se.parse_squeue(SQUEUE) + [{"state": "completed", "partitions": ["dev"], "user": "user01", "memory_mib": 0}]
    s = se.summary(states, cpus, mem_total, parts, jobs, per_user=True)
    assert s["nodes"] == {"idle": 0, "allocated": 1, "mixed": 0, "down": 0, "drain": 0, "other": 0}
    assert s["jobs"] == {"running": 1, "pending": 1, "completed": 1}
    assert s["partitions"] == {"dev": {"running": 1, "pending": 1}}
    assert s["users"] == {"user01": {"running": 1, "pending": 0}, "user02": {"running": 0, "pending": 1}}
    assert s["memory_mib"] == {"allocated": 576, "total": 576}
    assert "users" not in se.summary(states, cpus, mem_total, parts, jobs, per_user=False)


def _parse_text(text: str) -> list[tuple[dict, float]]:
    """Prometheus's text format read back as an instant query's (labels, value) pairs."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if p) if rest else {}
        out.append(({"__name__": name, **{k: v.strip('"') for k, v in labels.items()}}, float(value)))
    return out


def test_the_exposition_text_round_trips_into_the_probe_s_sample():
    """What the exporter serves, read back the way the probe reads Prometheus, is the exporter's summary."""
    s = se.summary(*se.parse_sinfo(SINFO), se.parse_squeue(SQUEUE), per_user=True)
    text = se.render(s, ok=True, seconds=1.25, updated=1796407923.035)
    assert "slurm_memory_total_bytes 603979776\n" in text  # whole numbers stay whole, not 6.0398e+08
    assert 'slurm_user_jobs{user="user02",state="pending"} 1' in text
    got = ex.sample(_parse_text(text), {}, ext(ADVANCED, members=()), 0.0)["slurm"]
    assert got == s


def test_exporter_without_slurm_says_so_and_serves_no_numbers():
    text = se.render(None, ok=False, seconds=0.5, updated=1.0)
    assert "slurm_exporter_up 0" in text and "slurm_nodes" not in text


def test_the_cache_asks_slurm_at_most_once_per_max_age():
    now = [100.0]
    asked = []

    def ask(argv):
        asked.append(argv[0])
        return SINFO if argv[0] == "sinfo" else SQUEUE

    cache = se.Cache(max_age=14, per_user=False, ask=ask, clock=lambda: now[0])
    first = cache.get()
    now[0] += 13.9
    assert cache.get() == first and asked == ["sinfo", "squeue"]
    now[0] += 0.2
    cache.get()
    assert asked == ["sinfo", "squeue"] * 2 and cache.refreshes == 2


def test_a_failing_slurm_command_makes_the_exporter_report_down():
    def ask(argv):
        raise RuntimeError("sinfo exit 1: slurm_load_partitions: Unable to contact slurm controller")

    assert "slurm_exporter_up 0" in se.Cache(10, False, ask=ask).get()


def test_the_exporter_serves_http_from_its_cache():
    cache = se.Cache(60, True, ask=lambda argv: SINFO if argv[0] == "sinfo" else SQUEUE)
    server = se.HTTPServer(("127.0.0.1", 0), se.handler_for(cache))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert 'slurm_nodes{state="allocated"} 1' in r.read().decode()
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            r.read()
        assert cache.refreshes == 1
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "/other", timeout=10)
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------ the probe's parsing
# Recorded on the same cluster with three members, user01's and user02's jobs running, a 30 s scrape
# interval: all answering; obs-compute-2's node exporter stopped, one scrape later (its `up_recent` still
# 1) and two intervals later (0).
def test_probe_of_the_recorded_answer():
    p = ex.parse(PROBE, ext(ADVANCED), 1796408700.0)
    assert p.unhealthy == {}
    s = p.sample
    assert s["time"] == 1796408700.0 and s["simulated"] is False
    assert s["slurm"]["jobs"] == {"running": 2, "pending": 0}
    assert s["slurm"]["nodes"] == {"idle": 0, "allocated": 2, "mixed": 0, "down": 0, "drain": 0, "other": 0}
    assert s["slurm"]["cpus"] == {"allocated": 2, "total": 2}
    assert s["slurm"]["memory_mib"] == {"allocated": 300, "total": 1152}
    assert s["slurm"]["partitions"] == {"dev": {"running": 2, "pending": 0}}
    assert s["slurm"]["users"] == {"user01": {"running": 1, "pending": 0}, "user02": {"running": 1, "pending": 0}}
    assert s["nodes"]["obs-compute-2"] == {"up": True, "load1": 0.51, "mem_used_mib": 180, "mem_total_mib": 714}
    assert s["nodes"]["obs-controller-1"]["mem_used_mib"] == (749678592 - 388116480) // 1048576
    assert set(s["nodes"]) == set(MEMBERS)
    json.dumps(s)  # JSON-safe


def test_the_query_asks_for_two_scrape_intervals_of_up():
    assert "max_over_time(up[65s])" in ex.query(ext({"scrapeIntervalSeconds": 30}))
    assert "max_over_time(up[125s])" in ex.query(ext())
    compile(ex.remote(ext()), "remote", "exec")
    assert repr(ex.query(ext())) in ex.remote(ext()) and ":9090/" in ex.remote(ext())


def test_probe_leaves_users_out_at_the_basic_slurm_level():
    assert "users" not in ex.parse(PROBE, ext(), 0.0).sample["slurm"]


def test_one_missed_scrape_is_not_unhealthy_two_intervals_are():
    once = ex.parse(PROBE_ONCE, ext(), 0.0)
    assert once.unhealthy == {}
    assert once.sample["nodes"]["obs-compute-2"] == {"up": False}  # it did not answer the last scrape
    down = ex.parse(PROBE_DOWN, ext(), 0.0)
    assert list(down.unhealthy) == ["obs-compute-2"]
    assert "connection refused" in down.unhealthy["obs-compute-2"]
    assert down.sample["nodes"]["obs-compute-2"] == {"up": False}
    assert down.sample["nodes"]["obs-controller-1"]["up"] is True


def test_probe_counts_a_member_without_a_target_and_ignores_targets_of_non_members():
    p = ex.parse(PROBE, ext(members=("obs-controller-1", "obs-compute-3")), 0.0)
    assert list(p.unhealthy) == ["obs-compute-3"] and "no target" in p.unhealthy["obs-compute-3"]
    assert set(p.sample["nodes"]) == {"obs-controller-1", "obs-compute-3"}


def _edit(doc: dict, job: str, node: str, health: str, recent: str | None) -> dict:
    doc = json.loads(json.dumps(doc))
    for t in doc["targets"]["data"]["activeTargets"]:
        if (t["labels"]["job"], t["labels"]["node"]) == (job, node):
            t["health"], t["lastError"] = health, "connection refused" if health == "down" else ""
    for r in doc["query"]["data"]["result"]:
        m = r["metric"]
        if (m["__name__"], m.get("job"), m.get("node")) == ("up_recent", job, node) and recent is not None:
            r["value"][1] = recent
    return doc


def test_a_target_not_scraped_yet_is_not_unhealthy():
    p = ex.parse(_edit(PROBE, "node", "obs-compute-1", "unknown", None), ext(), 0.0)
    assert p.unhealthy == {} and p.sample["nodes"]["obs-compute-1"] == {"up": False}


def test_a_silent_slurm_exporter_or_prometheus_names_the_controller():
    doc = _edit(PROBE_DOWN, "slurm", "obs-controller-1", "down", "0")
    assert "Slurm exporter does not answer" in ex.parse(doc, ext(), 0.0).unhealthy["obs-controller-1"]
    assert ex.parse(_edit(PROBE, "slurm", "obs-controller-1", "down", "1"), ext(), 0.0).unhealthy == {}
    p = ex.parse({"error": "URLError: <urlopen error [Errno 111] Connection refused>"}, ext(), 0.0)
    assert p.sample is None and "Prometheus does not answer" in p.unhealthy["obs-controller-1"]


def test_no_sample_while_prometheus_holds_no_slurm_numbers():
    doc = json.loads(json.dumps(PROBE))
    doc["query"]["data"]["result"] = [r for r in doc["query"]["data"]["result"]
                                      if not r["metric"]["__name__"].startswith("slurm_")]
    p = ex.parse(doc, ext(), 0.0)
    assert p.sample is None and p.unhealthy == {}


# ------------------------------------------------------------------ the role's variables and files
def test_role_vars_from_an_extension():
    v = ex.role_vars(ext(ADVANCED, members=("b", "a")))
    assert v == {"observability_state": "present", "observability_members": ["a", "b"],
                 "observability_node_level": "ADVANCED", "observability_slurm_level": "ADVANCED",
                 "observability_scrape_interval": 15}
    d = ex.role_vars(ext({}), "absent")
    assert (d["observability_state"], d["observability_node_level"], d["observability_slurm_level"],
            d["observability_scrape_interval"]) == ("absent", "BASIC", "BASIC", 60)


def test_role_layout_and_prefixed_variables():
    for part in ("defaults/main.yml", "tasks/main.yml", "tasks/validate.yml", "handlers/main.yml",
                 "files/observability.sh", "files/slurm_exporter.py"):
        assert (ROLE / part).is_file(), part
    for name in yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()):
        assert name.startswith("observability_"), name


def _render(tmp: Path, extravars: dict) -> Path:
    """The role's templates rendered by ansible-core with the role's defaults and `extravars`."""
    out = tmp / "out"
    out.mkdir()
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    play = [{"name": "Render the observability role's files", "hosts": "slurm_controller", "gather_facts": False,
             "connection": "local", "vars": {k: v for k, v in defaults.items() if k != "observability_members"},
             "tasks": [{"name": "Render", "ansible.builtin.template": {
                 "src": f"{ROLE}/templates/{{{{ item }}}}.j2", "dest": f"{out}/{{{{ item }}}}", "mode": "0644"},
                 "loop": ["prometheus.yml", "prometheus.conf", "node-exporter.conf", "slurm-exporter.service"]}]}]
    (tmp / "render.yml").write_text(yaml.safe_dump(play))
    (tmp / "vars.json").write_text(json.dumps(extravars))
    cmd = [_ansible_tool("ansible-playbook"), "-i", str(INVENTORY), str(tmp / "render.yml"), "-e", f"@{tmp / 'vars.json'}",
           "-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run(cmd, cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_the_role_renders_an_extension_s_configuration(tmp_path):
    e = Extension("sagemaker-observability", "1.1.0", settings(ADVANCED), ("demo-compute-1", "demo-controller-1"),
                  "demo-controller-1")
    out = _render(tmp_path, ex.role_vars(e))
    prom = yaml.safe_load((out / "prometheus.yml").read_text())
    assert prom["global"]["scrape_interval"] == "15s" and prom["global"]["scrape_timeout"] == "10s"
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert [(c["targets"], c["labels"]) for c in jobs["node"]["static_configs"]] == [
        (["192.0.2.31:9100"], {"node": "demo-compute-1"}), (["192.0.2.10:9100"], {"node": "demo-controller-1"})]
    assert jobs["slurm"]["static_configs"][0]["targets"] == ["127.0.0.1:9102"]
    assert jobs["slurm"]["scrape_timeout"] == "15s"  # never longer than the interval
    unit = (out / "prometheus.conf").read_text()
    assert "GOMEMLIMIT=100MiB" in unit and "--storage.tsdb.retention.time=6h" in unit
    node = (out / "node-exporter.conf").read_text()
    assert "--collector.disable-defaults" in node and "--collector.pressure" in node
    assert "nfs4?" in node and ")$$" in node  # systemd would expand a lone $
    slurm = (out / "slurm-exporter.service").read_text()
    assert "--max-age 14 --per-user" in slurm


def test_the_basic_levels_render_the_short_lists(tmp_path):
    e = Extension("sagemaker-observability", "1.0.0", settings({}), ("demo-controller-1",), "demo-controller-1")
    out = _render(tmp_path, ex.role_vars(e))
    node = (out / "node-exporter.conf").read_text()
    assert "--collector.loadavg" in node and "--collector.diskstats" not in node
    assert "--per-user" not in (out / "slurm-exporter.service").read_text()
    assert yaml.safe_load((out / "prometheus.yml").read_text())["global"]["scrape_interval"] == "60s"


def test_the_playbook_passes_syntax_check(tmp_path):
    cmd = [_ansible_tool("ansible-playbook"), "--syntax-check", "-i", str(INVENTORY), str(ROOT / "playbooks" / "extension.yml")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------ AnsibleConfigurer
class _Ctx:
    name = "obs"


@pytest.fixture
def runs(monkeypatch):
    got = []

    def fake(self, ctx, playbook, **kw):
        got.append((playbook, kw))
        fail = getattr(self, "fail", None)
        if fail is not None:
            raise PlaybookFailed(PlaybookResult(playbook, False, {}, failures=fail))
        return PlaybookResult(playbook, True, {})

    monkeypatch.setattr(ansible_conf.AnsibleConfigurer, "_run", fake)
    return got


def test_apply_runs_the_playbook_on_the_targets_and_the_controller(runs):
    conf = ansible_conf.AnsibleConfigurer("ssh")
    assert conf.extension_apply(_Ctx(), ext(ADVANCED), ["obs-compute-1"]) == {}
    playbook, kw = runs[0]
    assert playbook == "extension.yml" and kw["limit"] == ["obs-compute-1", "obs-controller-1"]
    assert kw["extravars"]["observability_state"] == "present"
    assert kw["extravars"]["observability_members"] == sorted(MEMBERS)


def test_remove_runs_absent_on_the_targets_only(runs):
    conf = ansible_conf.AnsibleConfigurer("ssh")
    assert conf.extension_remove(_Ctx(), ext(), ["obs-compute-1"]) == {}
    assert runs[0][1]["limit"] == ["obs-compute-1"] and runs[0][1]["extravars"]["observability_state"] == "absent"
    assert conf.extension_remove(_Ctx(), ext(), []) == {} and len(runs) == 1


def test_failures_are_per_node_and_an_unnamed_one_is_every_node_s(runs):
    conf = ansible_conf.AnsibleConfigurer("ssh")
    conf.fail = {"obs-compute-1": "task 'X' failed: prometheus-node-exporter did not start"}
    assert conf.extension_apply(_Ctx(), ext(), ["obs-compute-1"]) == conf.fail
    conf.fail = {"?": "ansible-runner status failed rc 2"}
    got = conf.extension_apply(_Ctx(), ext(), ["obs-compute-1"])
    assert set(got) == {"obs-compute-1", "obs-controller-1"} and all("rc 2" in w for w in got.values())


def test_an_unknown_extension_fails_every_target_without_a_run(runs):
    conf = ansible_conf.AnsibleConfigurer("ssh")
    other = Extension("sagemaker-other", "1.0.0", {}, MEMBERS, "obs-controller-1")
    assert set(conf.extension_apply(_Ctx(), other, ["obs-compute-1"])) == {"obs-compute-1", "obs-controller-1"}
    assert conf.extension_probe(_Ctx(), other, {}) is None and runs == []
