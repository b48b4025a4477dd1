"""roles/jupyterhub without a VM (issue 31): the hub's configuration rendered by ansible-core from the
role's defaults and the unit tests' inventory (demo-login-1), then run as JupyterHub would run it, with
batchspawner and get_config() stood in: the URLs, PAM, the allowed students, the Slurm request, and the
spawn form's values and refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from tests.unit.test_roles import INVENTORY, _ansible_tool, _env

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "jupyterhub"


def _render(tmp: Path, extravars: dict | None = None) -> str:
    out = tmp / "out"
    out.mkdir()
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    play = [{"name": "Render the jupyterhub role's files", "hosts": "slurm_login", "gather_facts": False,
             "connection": "local", "vars": defaults,
             "tasks": [{"name": "Render", "ansible.builtin.template": {
                 "src": f"{ROLE}/templates/{{{{ item }}}}.j2", "dest": f"{out}/{{{{ item }}}}", "mode": "0644"},
                 "loop": ["jupyterhub_config.py", "dropin.conf", "pam.jupyterhub", "students", "proxy.service"]}]}]
    (tmp / "render.yml").write_text(yaml.safe_dump(play))
    (tmp / "vars.json").write_text(json.dumps(extravars or {}))
    cmd = [_ansible_tool("ansible-playbook"), "-i", str(INVENTORY), str(tmp / "render.yml"), "-e", f"@{tmp / 'vars.json'}",
           "-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run(cmd, cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pam = (out / "pam.jupyterhub").read_text()  # a real VM's PAM refused a literal "\\n" after the last line
    assert pam.endswith("@include common-account\n") and "\\n" not in pam, repr(pam[-60:])
    assert "ExecStart=/usr/bin/python3 -m jupyterhub.app -f /etc/jupyterhub/slurmlab_config.py" in (out / "dropin.conf").read_text()
    (tmp / "students").write_text((out / "students").read_text())  # beside `out`: the tests read it
    return (out / "jupyterhub_config.py").read_text()


class Section(dict):
    def __getattr__(self, name):
        return self.setdefault(name, Section())

    def __setattr__(self, name, value):
        self[name] = value


def _run(config: str, monkeypatch, partitions: str = "dev\ngpu\n") -> tuple[Section, dict]:
    """The configuration as JupyterHub runs it: (c, the module's names)."""
    fake = types.ModuleType("batchspawner")

    class SlurmSpawner:
        job_status, job_id = "", ""

    fake.SlurmSpawner = SlurmSpawner
    monkeypatch.setitem(sys.modules, "batchspawner", fake)
    auth = types.ModuleType("jupyterhub.auth")

    class PAMAuthenticator:
        pass

    auth.PAMAuthenticator = PAMAuthenticator
    monkeypatch.setitem(sys.modules, "jupyterhub", types.ModuleType("jupyterhub"))
    monkeypatch.setitem(sys.modules, "jupyterhub.auth", auth)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, partitions, ""))
    c = Section()
    names = {"get_config": lambda: c, "__name__": "jupyterhub_config"}
    exec(compile(config, "jupyterhub_config.py", "exec"), names)
    return c, names


@pytest.fixture(scope="module")
def rendered_in(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jh")
    return _render(tmp), tmp


@pytest.fixture
def rendered(rendered_in):
    return rendered_in[0]


def test_the_hub_serves_the_cluster_s_path_and_lets_in_its_students_by_pam(rendered, monkeypatch):
    c, names = _run(rendered, monkeypatch)
    hub = c.JupyterHub
    assert hub.bind_url == "http://:8000/demo/"  # a path per cluster: the browser's cookies of 127.0.0.1 stay apart
    assert (hub.hub_ip, hub.hub_port, hub.hub_connect_ip) == ("0.0.0.0", 8081, "demo-login-1")
    assert hub.authenticator_class is names["LabPAMAuthenticator"] and c.PAMAuthenticator.service == "jupyterhub"
    assert names["STUDENTS"] == "/etc/jupyterhub/slurmlab_students"
    assert hub.spawner_class is names["LabSlurmSpawner"]
    assert hub.db_url == "sqlite:////var/lib/jupyterhub/jupyterhub.sqlite" and hub.cleanup_servers is False
    s = c.SlurmSpawner
    assert (s.req_partition, s.req_nprocs, s.req_memory, s.req_runtime) == ("dev", "1", "384M", "60")
    assert s.req_srun == "srun --overlap --mpi=none" and s.batch_query_cmd.endswith("'%T %r %B'")
    assert c.Spawner.env_keep == ["PATH", "LANG"] and c.Spawner.default_url == "/lab"


def test_the_students_of_now_log_in_read_at_each_login(rendered_in, monkeypatch, tmp_path):
    """`slurmlab users add|remove` rewrites the students file and never restarts the hub (everyone's
    session would drop): the authenticator reads the file at each login."""
    config, rendered_dir = rendered_in
    users = [u["name"] for u in yaml.safe_load(INVENTORY.read_text())["all"]["vars"]["slurmlab_users"]]
    listed = (rendered_dir / "students").read_text()
    assert users and listed == "".join(f"{u}\n" for u in users), repr(listed)
    _, names = _run(config, monkeypatch)
    students = tmp_path / "students"
    monkeypatch.setitem(names, "STUDENTS", str(students))
    auth = names["LabPAMAuthenticator"]()
    assert auth.check_allowed(users[0]) is False  # no file: nobody
    students.write_text(listed)
    assert auth.check_allowed(users[0]) and not auth.check_allowed("root") and not auth.check_allowed("vagrant")
    students.write_text(listed + "guest01\n")  # users add: the next login sees it
    assert auth.check_allowed("guest01")


def test_the_spawn_form_offers_slurm_s_partitions_and_refuses_wrong_values(rendered, monkeypatch):
    c, _ = _run(rendered, monkeypatch, partitions="gpu\ndev\nspare\ndev\n")
    form = c.Spawner.options_form(None)
    assert form.index('value="dev"') < form.index('value="gpu"') < form.index('value="spare"')  # the default first
    to_options = c.Spawner.options_from_form
    assert to_options({"partition": ["gpu"], "nprocs": ["2"], "memory": ["512"], "runtime": ["30"]}) == {
        "partition": "gpu", "nprocs": "2", "memory": "512M", "runtime": "30"}
    for bad, said in (({"partition": ["dev; rm -rf /"]}, "choose a partition"),
                      ({"nprocs": ["two"]}, "whole numbers"),
                      ({"memory": ["64"]}, "128 MiB"),
                      ({"runtime": ["9999"]}, "between 5 and 480 minutes")):
        form_values = {"partition": ["dev"], "nprocs": ["1"], "memory": ["384"], "runtime": ["60"], **bad}
        with pytest.raises(ValueError, match=said):
            to_options(form_values)


def test_the_waiting_page_says_what_slurm_says(rendered, monkeypatch):
    import asyncio

    _, names = _run(rendered, monkeypatch)
    spawner = names["LabSlurmSpawner"]()
    spawner.job_id, spawner.job_status = "42", "PENDING Resources n/a"
    spawner.state_ispending = lambda: True
    spawner.state_isrunning = lambda: False

    async def first():
        async for event in spawner.progress():
            return event

    assert asyncio.run(first()) == {"message": "Slurm job 42 is pending: Resources"}
    spawner.state_ispending, spawner.state_isrunning = (lambda: False), (lambda: True)
    spawner.state_gethost = lambda: "demo-compute-1"
    assert asyncio.run(first()) == {"message": "Slurm job 42 runs on demo-compute-1: JupyterLab is starting"}


def test_the_role_refuses_a_bad_base_url(tmp_path):
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    play = [{"name": "Validate", "hosts": "slurm_login", "gather_facts": False, "connection": "local", "vars": defaults,
             "tasks": [{"name": "Validate", "ansible.builtin.import_tasks": f"{ROLE}/tasks/validate.yml"}]}]
    (tmp_path / "v.yml").write_text(yaml.safe_dump(play))
    cmd = [_ansible_tool("ansible-playbook"), "-i", str(INVENTORY), str(tmp_path / "v.yml"), "-e", "jupyterhub_base_url=demo",
           "-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "jupyterhub_base_url a path" in proc.stdout, proc.stdout[-2000:]


# ---------------------------------------------------------------- the proxy, a service of its own (issue 44)
def test_the_proxy_is_a_service_the_hub_requires_and_does_not_start(rendered_in, monkeypatch):
    """A hub that starts configurable-http-proxy itself gives it 10 s to listen: on a loaded, emulated login
    node it took 13 s and the hub crash-looped. The proxy is its own unit, counted started once its API
    listens, and the hub's unit comes after it and talks to that API with the units' token."""
    rendered, tmp = rendered_in
    c, _ = _run(rendered, monkeypatch)
    proxy = c.ConfigurableHTTPProxy
    assert proxy.should_start is False and proxy.api_url == "http://127.0.0.1:8001"
    unit = (tmp / "out" / "proxy.service").read_text()
    dropin = (tmp / "out" / "dropin.conf").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert "--api-ip 127.0.0.1 --api-port 8001" in exec_start and "--port 8000" in exec_start
    assert "--default-target http://127.0.0.1:8081 --error-target http://127.0.0.1:8081/demo/hub/error" in exec_start
    assert 'ss -Hltn "sport = :8001"' in next(line for line in unit.splitlines() if line.startswith("ExecStartPost="))
    for line in ("Requires=jupyterhub-proxy.service", "After=jupyterhub-proxy.service",
                 "EnvironmentFile=/var/lib/jupyterhub/proxy.env", "RestartSec=5"):
        assert line in dropin.splitlines(), (line, dropin)
    assert "EnvironmentFile=/var/lib/jupyterhub/proxy.env" in unit.splitlines()
    for text in (unit, dropin):  # both ahead of a student's busy shell on the login node's vCPU
        assert {"CPUWeight=1000", "Nice=-5"} <= set(text.splitlines()), text


FAKES = {
    "systemctl": r'''#!/bin/sh
echo "systemctl $*" >> "$FAKE/calls"
case "$1" in
  is-active) cat "$FAKE/active-$2" 2>/dev/null || echo inactive ;;
  is-enabled) if [ -e "$FAKE/enabled-$2" ]; then echo enabled; else echo disabled; fi ;;
  enable) touch "$FAKE/enabled-$2" ;;
  start|restart) shift; for u; do [ ! -e "$FAKE/fail-$u" ] || exit 1; echo active > "$FAKE/active-$u"; done ;;
  show) case "$3" in NeedDaemonReload) if [ -e "$FAKE/stale" ]; then echo yes; else echo no; fi ;; *) echo 3 ;; esac ;;
esac
''',
    "ss": '#!/bin/sh\n[ ! -e "$FAKE/listen-${2##*:}" ] || echo "LISTEN 0 128 0.0.0.0:${2##*:} 0.0.0.0:*"\n',
    "journalctl": '#!/bin/sh\necho "the last lines of $2"\n',
    "timeout": '#!/bin/sh\n[ ! -e "$FAKE/healthy" ] || printf "HTTP/1.1 200 OK\\r\\n"\n',
}


def _hub_script(tmp: Path, fake: Path, wait_s: int = 2, state: str = "present") -> subprocess.CompletedProcess:
    """roles/jupyterhub/files/jupyterhub.sh as tasks/main.yml sends it (install_if_changed in front), present,
    with stand-ins for the node's commands and its files under tmp."""
    import base64

    script = "\n".join([(ROOT / "roles/common/files/install-if-changed.sh").read_text(),
                        (ROOT / "roles/common/files/units-absent.sh").read_text(),
                        (ROLE / "files/jupyterhub.sh").read_text()])
    files = [base64.b64encode(f"{name} text\n".encode()).decode() for name in ("conf", "pam", "dropin", "unit", "students")]
    args = [state, tmp / "etc/slurmlab_config.py", tmp / "pam/jupyterhub", tmp / "systemd/jupyterhub.service.d/slurmlab.conf",
            tmp / "systemd/jupyterhub-proxy.service", tmp / "data", "8000", "8001", "8081", "/demo/", tmp / "etc/students",
            str(wait_s), *(files if state == "present" else [])]
    return subprocess.run(["sh", "-c", script, "slurmlab-jupyterhub", *map(str, args)], capture_output=True, text=True,
                          env={"PATH": f"{fake / 'bin'}:/usr/bin:/bin", "FAKE": str(fake)}, timeout=60)


@pytest.fixture
def fake(tmp_path):
    fake = tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    for name, text in FAKES.items():
        (fake / "bin" / name).write_text(text)
        (fake / "bin" / name).chmod(0o755)
    return fake


def test_the_script_starts_the_proxy_before_the_hub_and_a_second_run_changes_nothing(tmp_path, fake):
    for port in ("8000", "8001", "8081"):
        (fake / f"listen-{port}").touch()
    (fake / "healthy").touch()
    first = _hub_script(tmp_path, fake)
    assert first.returncode == 0, first.stdout + first.stderr
    calls = (fake / "calls").read_text().splitlines()
    acts = [c for c in calls if c.split()[1] in ("enable", "daemon-reload", "start", "restart")]
    # units systemd had not loaded: no daemon-reload (they read their files when they start)
    assert acts == ["systemctl enable jupyterhub-proxy --no-reload", "systemctl enable jupyterhub --no-reload",
                    "systemctl restart jupyterhub-proxy", "systemctl start jupyterhub"], calls
    token = tmp_path / "data" / "proxy.env"
    assert token.stat().st_mode & 0o777 == 0o600
    value = token.read_text().strip().removeprefix("CONFIGPROXY_AUTH_TOKEN=")
    assert len(value) == 64 and int(value, 16) and value not in first.stdout + first.stderr
    (fake / "calls").unlink()
    second = _hub_script(tmp_path, fake)
    assert second.returncode == 0 and "changed" not in second.stdout, second.stdout + second.stderr
    assert not [c for c in (fake / "calls").read_text().splitlines() if c.split()[1] in ("start", "restart")]
    assert token.read_text().strip().endswith(value)  # the token is made once


def test_a_new_proxy_unit_restarts_the_proxy_and_the_hub_together(tmp_path, fake):
    for port in ("8000", "8001", "8081"):
        (fake / f"listen-{port}").touch()
    (fake / "healthy").touch()
    assert _hub_script(tmp_path, fake).returncode == 0
    (tmp_path / "systemd/jupyterhub-proxy.service").write_text("an older unit\n")
    (fake / "stale").touch()  # systemd holds the older unit: a reload first
    (fake / "calls").unlink()
    again = _hub_script(tmp_path, fake)
    assert again.returncode == 0, again.stdout + again.stderr
    acts = [c for c in (fake / "calls").read_text().splitlines() if c.split()[1] in ("daemon-reload", "start", "restart")]
    assert acts == ["systemctl daemon-reload", "systemctl restart jupyterhub-proxy jupyterhub"]


@pytest.mark.parametrize(("setup", "said"), [
    ({"fail-jupyterhub-proxy"}, "the proxy (jupyterhub-proxy) did not start listening on :8001: the last lines of jupyterhub-proxy"),
    ({"listen-8000", "listen-8001"},
     "the hub (jupyterhub) does not listen on :8081 after 2 s (restarted 3 times): the last lines of jupyterhub"),
    ({"listen-8000", "listen-8001", "listen-8081"},
     "the proxy on :8000 answers 'nothing' for /demo/hub/health after 2 s: the last lines of jupyterhub"),
])
def test_a_hub_that_does_not_come_up_is_named_with_its_journal(tmp_path, fake, setup, said):
    for name in setup:
        (fake / name).touch()
    p = _hub_script(tmp_path, fake)
    assert p.returncode == 1 and f"slurmlab-jupyterhub failed: {said}" in p.stderr, p.stdout + p.stderr


def test_absent_stops_both_units_and_removes_what_the_role_wrote(tmp_path, fake):
    for port in ("8000", "8001", "8081"):
        (fake / f"listen-{port}").touch()
    (fake / "healthy").touch()
    assert _hub_script(tmp_path, fake).returncode == 0
    (fake / "calls").unlink()
    gone = _hub_script(tmp_path, fake, state="absent")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    calls = (fake / "calls").read_text().splitlines()
    assert "systemctl disable --now --no-reload jupyterhub" in calls
    assert "systemctl disable --now --no-reload jupyterhub-proxy" in calls
    for line in ("jupyterhub stopped", "jupyterhub-proxy stopped", f"{tmp_path / 'systemd/jupyterhub-proxy.service'} removed",
                 f"{tmp_path / 'data'} removed"):
        assert f"slurmlab-jupyterhub changed: {line}" in gone.stdout, gone.stdout
    assert not (tmp_path / "systemd/jupyterhub-proxy.service").exists() and not (tmp_path / "data").exists()
    assert calls[-1] == "systemctl daemon-reload"  # the units' files went: systemd forgets them
