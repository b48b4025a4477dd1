"""ansible-runner, one private data dir per run, failures reduced to 'which task, which host, why'."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lab import paths
from lab.configure import inventory as inv
from lab.configure.base import ConfigureError
from lab.osutil import atomic_write

log = logging.getLogger(__name__)
_seq = 0
_seq_lock = threading.Lock()


@dataclass
class PlaybookResult:
    playbook: str
    ok: bool
    changed: dict[str, int]
    failures: dict[str, str] = field(default_factory=dict)  # host -> "task 'X': message"
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # "host: text" from tasks that say "slurmlab warning: ..."


class PlaybookFailed(ConfigureError):
    def __init__(self, result: PlaybookResult):
        hosts = ", ".join(f"{h}: {m}" for h, m in sorted(result.failures.items())) or "no host named"
        super().__init__(f"{result.playbook} failed: {hosts}", result.failures)
        self.result = result


def envvars(ctx: inv.ClusterContext) -> dict[str, str]:
    return ssh_envvars(ctx.ssh_executable)


def ssh_envvars(ssh_executable: str) -> dict[str, str]:
    """Ansible's environment for VMs reached with `ssh_executable` (a cluster's, or a role template's build)."""
    # ssh's masters (ControlPersist) per namespace: ControlPath's %C hashes the address, not the
    # namespace, and a master left in a lost host's namespace would carry a new VM's connection to
    # the old VM at the same address (found by the second-host e2e)
    cp = Path("/tmp") / f"slurmlab-cp-{os.getuid()}-{Path(ssh_executable).name}"
    cp.mkdir(mode=0o700, exist_ok=True)
    return {
        "ANSIBLE_ROLES_PATH": str(paths.resource("roles")),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=120s -o UserKnownHostsFile=/dev/null "
                            "-o StrictHostKeyChecking=no -o ServerAliveInterval=15",
        "ANSIBLE_SSH_TRANSFER_METHOD": "piped",
        "ANSIBLE_SSH_EXECUTABLE": ssh_executable,
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp),  # the ssh plugin's name for it (ANSIBLE_CONTROL_PATH_DIR is read by nothing)
        "ANSIBLE_SSH_RETRIES": "3",
        "ANSIBLE_TIMEOUT": "30",
        "ANSIBLE_FORKS": "10",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_INTERPRETER_PYTHON": "/usr/bin/python3",
        # ansible-playbook from this interpreter's virtualenv, even when its bin/ is not on PATH
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }


def _failures(events) -> dict[str, str]:
    out: dict[str, str] = {}
    for ev in events:
        if ev.get("event") not in ("runner_on_failed", "runner_on_unreachable"):
            continue
        data = ev.get("event_data", {})
        if data.get("ignore_errors"):
            continue
        res = data.get("res", {}) or {}
        msg = res.get("msg") or res.get("stderr") or res.get("stdout") or ""
        if isinstance(msg, list):
            msg = " ".join(map(str, msg))
        said = str(res.get("stderr") or res.get("stdout") or "").strip()
        if msg == "non-zero return code" and said:  # a command: what it said is the reason
            msg = f"exit {res.get('rc')}: {said.splitlines()[-1]}"
        msg = " ".join(str(msg).split())[:300]
        kind = "unreachable" if ev["event"] == "runner_on_unreachable" else "failed"
        out[data.get("host", "?")] = f"task '{data.get('task', '?')}' {kind}: {msg}"
    return out


WARNING_PREFIX = "slurmlab warning: "


def _warnings(events) -> list[str]:
    """What the roles report with a debug task whose message starts with WARNING_PREFIX
    (a boot-time setup that did not happen, ...): the engine turns them into events."""
    out = []
    for ev in events:
        if ev.get("event") != "runner_on_ok":
            continue
        data = ev.get("event_data", {})
        msg = (data.get("res") or {}).get("msg")
        if isinstance(msg, str) and msg.startswith(WARNING_PREFIX):
            out.append(f"{data.get('host', '?')}: {msg[len(WARNING_PREFIX):]}"[:300])
    return out


def run_playbook(ctx: inv.ClusterContext, playbook: str, *, limit: list[str] | None = None,
                 joining: list[str] = (), extravars: dict | None = None, workdir: Path,
                 on_event: Callable[[dict], None] | None = None) -> PlaybookResult:
    """One ansible-playbook run. `on_event`, if given, sees each ansible-runner event as it arrives
    (its errors are logged, never raised: every event is still kept for the failure report)."""
    import ansible_runner

    global _seq
    with _seq_lock:
        _seq += 1
        seq = _seq
    run_dir = workdir / "ansible" / f"{time.strftime('%Y%m%d-%H%M%S')}-{seq:04d}-{playbook.removesuffix('.yml')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    inventory_file = run_dir / "inventory.yml"
    data = inv.build(ctx, joining)
    atomic_write(inventory_file, yaml.safe_dump(data, sort_keys=True), 0o600)
    atomic_write(workdir / "inventory.yml", yaml.safe_dump(inv.build(ctx), sort_keys=True), 0o600)
    t0 = time.monotonic()

    def keep(event: dict) -> bool:
        try:
            on_event(event)
        except Exception:  # noqa: BLE001 - an observer never breaks the run
            log.exception("event handler")
        return True  # ansible-runner drops events whose handler returns a false value

    r = ansible_runner.run(
        private_data_dir=str(run_dir),
        project_dir=str(paths.resource("playbooks")),
        playbook=playbook,
        inventory=str(inventory_file),
        limit=",".join(limit) if limit else None,
        extravars=extravars or {},
        envvars=envvars(ctx),
        quiet=True,
        suppress_env_files=True,
        event_handler=keep if on_event is not None else None,
    )
    stats = r.stats or {}
    result = PlaybookResult(
        playbook=playbook,
        ok=r.rc == 0 and r.status == "successful",
        changed=dict(stats.get("changed", {})),
        failures=_failures(r.events),
        seconds=time.monotonic() - t0,
        warnings=_warnings(r.events),
    )
    if not result.ok and not result.failures:
        result.failures = {"?": f"ansible-runner status {r.status} rc {r.rc}; see {run_dir}"}
    log.info("%s limit=%s ok=%s changed=%s %.1fs", playbook, limit, result.ok, result.changed, result.seconds)
    if not result.ok:
        raise PlaybookFailed(result)
    return result
