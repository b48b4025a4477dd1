"""Deep health checks on real VMs (StartClusterHealthCheck), over SSH inside the lab's namespace.

The compute nodes under test go into a Slurm maintenance reservation first (`scontrol create
reservation ... Flags=MAINT,IGNORE_JOBS`: no new job lands on them; a running job runs on) and come
out of it at the end, whatever happened. Then, in parallel over the nodes:

- InstanceStress, in each node (NODE_SCRIPT): the daemons the verify suite checks on that kind of
  node are active (munge everywhere; slurmctld, slurmd or sackd), the munge key is 0400 munge, and a
  short stress: every core hashes 32 MiB of zeros (the digest must be right), a quarter of the free
  memory (at most 256 MiB) is filled and read back, 32 MiB are written to /var/tmp, synced, read back.
- InstanceConnectivity, from the controller: one `srun -N<k>` across the group's nodes under test
  in the reservation; a node that does not answer fails (each node alone again, to name the one). A
  node whose slurmd InstanceStress found down is not waited for: its job-step checks fail at once.
- MultiNodeTrainingValidation: one multi-node job step (a task per node, each hashes 8 MiB); every
  node must run its task and the outputs must agree.

Each failure is "Check: what" (lab/engine/bookkeeping.py health_outcome decides reboot or replace).
"""

from __future__ import annotations

import hashlib
import logging
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from lab.configure.inventory import ClusterContext, default_partition
from lab.providers.reach import ssh_command

log = logging.getLogger(__name__)

MIB = 1 << 20
ZERO_32M = hashlib.sha256(bytes(32 * MIB)).hexdigest()
ZERO_8M = hashlib.sha256(bytes(8 * MIB)).hexdigest()
DAEMONS = {"Controller": "munge slurmctld", "Login": "munge sackd", "Compute": "munge slurmd"}
SRUN_WAIT = 30  # s an srun waits for its nodes (--immediate) before it gives up

# InstanceStress inside one node, as root; $1: the daemons, $2: the digest of 32 MiB of zeros.
# Prints "FAIL InstanceStress: ..." per problem and one "DONE ..." line.
NODE_SCRIPT = r"""
set -u
fail() { echo "FAIL InstanceStress: $*"; }
t0=$(date +%s)
for s in $1; do
  st=$(systemctl is-active "$s" 2>/dev/null)
  [ "$st" = active ] || fail "$s is ${st:-unknown} (systemctl is-active $s)"
done
k=$(stat -c '%a %U' /etc/munge/munge.key 2>/dev/null)
[ "$k" = "400 munge" ] || fail "munge key /etc/munge/munge.key is '${k:-missing}', want mode 400 owned by munge"
dir=$(mktemp -d) || { fail "disk: cannot create a folder in /tmp"; exit 0; }
n=$(nproc); i=0
while [ "$i" -lt "$n" ]; do (head -c 33554432 /dev/zero | sha256sum > "$dir/cpu$i") & i=$((i + 1)); done
wait
for f in "$dir"/cpu*; do
  [ "$(cut -d' ' -f1 "$f")" = "$2" ] || fail "cpu: a core hashed 32 MiB of zeros wrong ($(cut -c1-12 "$f"))"
done
rm -rf "$dir"
kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
kib=$((${kib:-0} / 4)); [ "$kib" -gt 262144 ] && kib=262144
m=$((kib * 1024))
python3 -c 'import sys; n = int(sys.argv[1]); b = bytearray(b"\xa5") * n; sys.exit(b.count(0xa5) != n)' "$m" \
  || fail "memory: $((m / 1048576)) MiB filled with a pattern did not read back"
free=$(df -Pk /var/tmp | awk 'NR == 2 {print $4}')
if [ "${free:-0}" -lt 65536 ]; then
  fail "disk: /var/tmp has $((${free:-0} / 1024)) MiB free, under 64 MiB"
else
  f=/var/tmp/slurmlab-healthcheck
  if head -c 33554432 /dev/zero > "$f" && sync; then
    [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "$2" ] || fail "disk: 32 MiB written to /var/tmp read back wrong"
  else
    fail "disk: cannot write 32 MiB to /var/tmp"
  fi
  rm -f "$f"
fi
echo "DONE cpu $n core(s), memory $((m / 1048576)) MiB, disk 32 MiB in $(( $(date +%s) - t0 )) s"
"""


def _ssh(ctx: ClusterContext, address: str, command: str, script: str | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*ssh_command(ctx.name, address), command], input=script, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          stdin=None if script is not None else subprocess.DEVNULL)


def _stress(ctx: ClusterContext, address: str, node_type: str) -> list[str]:
    try:
        p = _ssh(ctx, address, f"sudo sh -s -- {shlex.quote(DAEMONS.get(node_type, 'munge'))} {ZERO_32M}", NODE_SCRIPT)
    except subprocess.TimeoutExpired:
        return ["InstanceStress: the node's checks did not finish within 300 s"]
    found = [line[5:].strip() for line in p.stdout.splitlines() if line.startswith("FAIL ")]
    if not found and "DONE " not in p.stdout:
        found = [f"InstanceStress: the checks could not run (ssh exit {p.returncode}): {p.stdout.strip()[-200:]}"]
    log.info("InstanceStress on %s: %s", address, "; ".join(found) or p.stdout.strip().splitlines()[-1:])
    return found


def _srun(ctx: ClusterContext, controller: str, reservation: str, partition: str, nodes: list[str],
          command: str) -> tuple[int, list[str]]:
    """One job step, a task per node, in the reservation: (exit code, its output lines)."""
    cmd = (f"sudo timeout {SRUN_WAIT + 90} srun --reservation={reservation} -p {shlex.quote(partition)} "
           f"-N{len(nodes)} --ntasks-per-node=1 -w {','.join(nodes)} --immediate={SRUN_WAIT} "
           f"sh -c {shlex.quote(command)}")
    try:
        p = _ssh(ctx, controller, cmd, timeout=SRUN_WAIT + 150)
    except subprocess.TimeoutExpired:
        return 124, ["timed out"]
    return p.returncode, [line.strip() for line in p.stdout.splitlines() if line.strip()]


def _across(ctx, controller, reservation, partition, nodes, check: str, command: str, want) -> dict[str, list[str]]:
    """A multi-node step over `nodes`; a node missing from its output (or a step that failed) fails
    `check`. If the whole step fails, each node alone again says which one is at fault."""
    rc, lines = _srun(ctx, controller, reservation, partition, nodes, command)
    answered = {x.split()[0] for x in lines if want(x)}
    out = {x: [] for x in nodes}
    if rc == 0 and set(nodes) <= answered:
        return out
    culprits = []
    for x in nodes:
        one_rc, one = _srun(ctx, controller, reservation, partition, [x], command)
        if one_rc != 0 or not any(want(y) for y in one):
            culprits.append(x)
            out[x].append(f"{check}: srun on {x} alone failed (exit {one_rc}): {' '.join(one)[-160:]}")
    if not culprits:  # each alone works, together they do not: all of them
        for x in nodes:
            out[x].append(f"{check}: srun -N{len(nodes)} across {', '.join(nodes)} failed (exit {rc}): "
                          f"{' '.join(lines)[-160:]}")
    return out


def run(ctx: ClusterContext, targets: dict[str, list[str]], op_id: str) -> dict[str, list[str]]:
    """The checks `targets` names (node -> checks); node -> failures (empty: passed)."""
    types = {g.name: g for g in ctx.groups}
    by_name = {n.name: n for n in ctx.nodes}
    controller = next(n for n in ctx.nodes if types[n.grp].node_type == "Controller")
    compute = sorted(x for x in targets if types[by_name[x].grp].node_type == "Compute")
    reservation = f"slurmlab-healthcheck-{op_id[:8]}"
    out: dict[str, list[str]] = {x: [] for x in targets}
    t0 = time.monotonic()
    if compute:
        made = _ssh(ctx, controller.address, f"sudo scontrol delete ReservationName={reservation} >/dev/null 2>&1; "
                    f"sudo scontrol create reservation ReservationName={reservation} StartTime=now "
                    f"Duration=UNLIMITED Users=root Flags=MAINT,IGNORE_JOBS Nodes={','.join(compute)}", timeout=120)
        if made.returncode != 0:
            log.warning("no maintenance reservation for %s: %s", compute, made.stdout.strip()[-300:])
    try:
        stressed = [x for x, checks in targets.items() if "InstanceStress" in checks]
        with ThreadPoolExecutor(max(1, len(stressed))) as pool:
            found = pool.map(lambda x: _stress(ctx, by_name[x].address, types[by_name[x].grp].node_type), stressed)
            for x, failures in zip(stressed, found):
                out[x] += failures
        by_group: dict[tuple[str, str], list[str]] = {}
        for x in compute:
            # a node whose slurmd is down cannot run a job step: said at once, not found by waiting for srun
            down = any(f.startswith("InstanceStress: slurmd is ") for f in out[x])
            for check in ("InstanceConnectivity", "MultiNodeTrainingValidation"):
                if check in targets[x] and down:
                    out[x].append(f"{check}: not run: slurmd is not active on {x}")
                elif check in targets[x]:
                    by_group.setdefault((by_name[x].grp, check), []).append(x)
        for (grp, check), nodes in sorted(by_group.items()):
            partition = (types[grp].partitions or [default_partition(ctx)])[0]
            if check == "InstanceConnectivity":
                found = _across(ctx, controller.address, reservation, partition, nodes, check,
                                'echo "$SLURMD_NODENAME"', lambda line: bool(line))
            else:
                found = _across(ctx, controller.address, reservation, partition, nodes, check,
                                'echo "$SLURMD_NODENAME $(head -c 8388608 /dev/zero | sha256sum)"',
                                lambda line: ZERO_8M in line)
            for x, failures in found.items():
                out[x] += failures
    finally:
        if compute:
            _ssh(ctx, controller.address, f"sudo scontrol delete ReservationName={reservation}", timeout=120)
    log.info("deep health check %s on %s: %.0f s", op_id[:8], ", ".join(targets), time.monotonic() - t0)
    return out
