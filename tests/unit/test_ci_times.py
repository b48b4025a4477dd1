"""scripts/ci_times.py (issue 43): each phase's time and the slowest tests, from pytest's JUnit XML and the
phases `make test` noted before pytest."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("ci_times", ROOT / "scripts" / "ci_times.py")
ci_times = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ci_times)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.unit.test_plan" name="test_plan_rules[a]" time="0.5"/>
<testcase classname="tests.unit.test_plan" name="test_plan_rules[b]" time="0.25"/>
<testcase classname="tests.api.test_boto3" name="test_create" time="12.0"/>
<testcase classname="tests.e2e.test_cluster" name="test_inservice" time="170.0"/>
<testcase classname="tests.e2e.test_cluster" name="test_rolling_update" time="347.0"><failure message="x"/></testcase>
</testsuite></testsuites>"""


def test_phases_sum_the_tests_under_each_folder_and_the_steps_before_pytest(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT)
    (tmp_path / "phases").write_text("setup 60\nsetup 5\nsetup 40\nlint 38\nnot a line\n")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_times.py"), str(tmp_path / "junit.xml"),
                        "--phases", str(tmp_path / "phases"), "--total-s", "700", "--json", str(tmp_path / "t.json")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "t.json").read_text())
    assert res["phases"] == {"setup": 105.0, "lint": 38.0, "unit": 0.8, "api": 12.0, "e2e": 517.0}
    assert res["total_s"] == 700.0 and res["tests"]["tests/e2e/test_cluster.py::test_rolling_update"] == 347.0
    lines = p.stdout.splitlines()
    assert lines[0] == "ci: time per phase: setup 105 s, lint 38 s, unit 1 s, api 12 s, e2e 517 s (total 700 s)"
    assert lines[2].endswith("tests/e2e/test_cluster.py::test_rolling_update") and "347.0 s" in lines[2]


def test_streams_are_wall_times_beside_the_phases_and_every_junit_counts(tmp_path):
    (tmp_path / "a.xml").write_text(JUNIT)
    (tmp_path / "b.xml").write_text(JUNIT.replace("tests.e2e.test_cluster", "tests.e2e.test_updates"))
    (tmp_path / "phases").write_text("setup 10\nstream:class 600\nstream:rest 450\n")
    assert ci_times.main([str(tmp_path / "a.xml"), str(tmp_path / "b.xml"), "--phases", str(tmp_path / "phases"),
                          "--json", str(tmp_path / "t.json")]) == 0
    res = json.loads((tmp_path / "t.json").read_text())
    assert res["streams"] == {"class": 600.0, "rest": 450.0} and res["phases"]["e2e"] == 1034.0
    assert "tests/e2e/test_updates.py::test_inservice" in res["tests"]
    assert ci_times.main([str(tmp_path / "a.xml"), str(tmp_path / "missing.xml")]) == 1


def test_no_junit_says_so_and_fails(tmp_path):
    assert ci_times.main([str(tmp_path / "junit.xml")]) == 1


def test_at_most_fifteen_slowest():
    res = ci_times.summary({f"tests/unit/t.py::t{i}": float(i) for i in range(40)}, {}, None)
    out = ci_times.render(res).splitlines()
    assert len(out) == 2 + 15 + 1 and out[2].endswith("t39") and out[-1] == "ci: 0 test(s) failed"


def test_the_tests_whose_clusters_used_the_most_cpu(tmp_path, capsys):
    (tmp_path / "junit.xml").write_text(JUNIT)
    lines = [{"test": "tests/e2e/test_cluster.py::test_inservice", "seconds": 170, "vm_cpu_s": {"class": 40.0, "patch": 90.0}},
             {"test": "tests/e2e/test_cluster.py::test_rolling_update", "seconds": 347, "vm_cpu_s": {"class": 120.0}},
             {"test": "tests/e2e/test_cluster.py::test_idle", "seconds": 3, "vm_cpu_s": {}}]
    (tmp_path / "vm.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    assert ci_times.main([str(tmp_path / "junit.xml"), "--vm-cpu", str(tmp_path / "vm.jsonl"),
                          "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if "clusters' VMs used the most CPU" in line)
    assert out[at + 1].endswith("test_rolling_update  (class 120 s)") and "120.0 s" in out[at + 1]
    assert out[at + 2].endswith("test_inservice  (patch 90 s, class 40 s)")
    assert json.loads((tmp_path / "t.json").read_text())["vm_cpu"]["tests/e2e/test_cluster.py::test_idle"] == {}


def test_a_test_is_ranked_by_its_own_clusters_when_its_line_names_them(tmp_path, capsys):
    (tmp_path / "junit.xml").write_text(JUNIT)
    lines = [{"test": "t::patch_up", "seconds": 300, "vm_cpu_s": {"class": 200.0, "patch": 90.0, "twin": 80.0},
              "own": ["patch", "twin"]},
             {"test": "t::scale_out", "seconds": 400, "vm_cpu_s": {"class": 150.0, "patch": 30.0}, "own": ["class"]}]
    (tmp_path / "vm.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert ci_times.main([str(tmp_path / "junit.xml"), "--vm-cpu", str(tmp_path / "vm.jsonl")]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if "own clusters' VMs used the most CPU" in line)
    # patch_up's own VMs (170 s) rank before scale_out's (150 s), although class's 200 s ran beside it
    assert out[at + 1].startswith("ci:    170.0 s  t::patch_up") and out[at + 2].startswith("ci:    150.0 s  t::scale_out")


def test_the_failed_tests_come_last_with_their_first_line(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT.replace('<failure message="x"/>',
                                                      '<failure message="AssertionError: srun failed&#10;more"/>'))
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_times.py"), str(tmp_path / "junit.xml"),
                        "--json", str(tmp_path / "t.json")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-2:] == [
        "ci: 1 test(s) failed:",
        "ci: FAILED tests/e2e/test_cluster.py::test_rolling_update: AssertionError: srun failed"]
    assert json.loads((tmp_path / "t.json").read_text())["failed"] == {
        "tests/e2e/test_cluster.py::test_rolling_update": "AssertionError: srun failed"}
