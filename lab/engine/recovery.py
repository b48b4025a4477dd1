"""Pure: what Slurm's view of the nodes means for the lab (docs/recovery.md).

The engine reads the compute nodes' states from slurmctld every SLURM_PERIOD_S (one `sinfo` on the
controller: lab/configure/slurmstate.py) and gives them here with the stored nodes. Out come
decisions, no I/O:

- `mark` / `clear`: a running node whose Slurm state is DOWN, NOT_RESPONDING (`*`) or FAIL shows it
  (InstanceStatus Message, one event, its group Degraded); healthy again, the mark goes.
- the recovery ladder, NodeRecovery Automatic, for a node DOWN or NOT_RESPONDING longer than
  `recover_after_s`: `repair` (restart slurmd, cheap), then `reboot`, then `replace`, one step each
  time the node is still down `recover_after_s` after the previous one. With NodeRecovery None: the
  mark only.
- a reason set by a user, as HyperPod documents it (`scontrol update node=X state=fail
  reason="Action:Replace"`; drain and down count too): `Action:Reboot` -> `reboot`,
  `Action:Replace` -> `replace`, whatever NodeRecovery says. With a job still on the node (FAILING,
  DRAINING) the lab waits for the job, as HyperPod does; `state=down` kills the jobs at once and the
  node goes at once. Any other reason
  (a user's drain, a FAIL for their own reasons) is the user's business: shown, never acted on.
- protected mode: a group whose nodes failed PROTECT_AFTER times in a row (each within
  PROTECT_WINDOW_S of the one before: launches, configures, reboots and replaces by recovery) stops
  retrying until `slurmlab resume-group` (ParallelCluster's clustermgtd "protected mode").
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.configure.sinfo import SlurmNode
from lab.engine.states import Phase


SLURM_PERIOD_S = 15.0  # how often the engine asks slurmctld (one sinfo: ~1 s of an emulated controller)
RECOVER_AFTER_S = 30.0  # a node DOWN this long gets the next recovery step
PROTECT_AFTER = 5  # failures in a row before a group is protected
PROTECT_WINDOW_S = 1800.0  # a failure longer after the previous one starts the count again

LAB_REASON = "slurmlab:"  # the prefix of the reasons the lab itself sets (a node it takes down to recover)
LADDER = ("repair", "reboot", "replace")


@dataclass(frozen=True)
class Decision:
    kind: str  # mark | clear | repair | reboot | replace | wait
    node: str
    group: str
    text: str = ""  # mark: what to show; repair/reboot/replace: why (the event)
    by_user: bool = False  # an Action: reason: not counted against the group, honored without NodeRecovery


def assess(nodes, groups, view: dict[str, SlurmNode], taken_at: float, now: float, busy: set[str],
           recovery: str, recover_after_s: float = RECOVER_AFTER_S) -> list[Decision]:
    """Decisions for the running compute nodes Slurm has shown since they joined. `nodes`: NodeRow;
    `groups`: GroupRow; `view`: Slurm's nodes as read at `taken_at`; `busy`: nodes with work in flight;
    `recovery`: the cluster's NodeRecovery."""
    gmap = {g.name: g for g in groups}
    out: list[Decision] = []
    for n in nodes:
        g = gmap.get(n.grp)
        sn = view.get(n.name)
        if (g is None or g.node_type != "Compute" or sn is None or n.phase != Phase.RUNNING or n.pending
                or n.joined_at is None or n.joined_at > taken_at or n.name in busy):
            continue  # not in Slurm yet, or Slurm's answer is older than the node's join
        asked = sn.action()  # drained, failed or down by a user with an Action: reason
        trouble = sn.trouble() or (f"Slurm: {sn.state} ({sn.reason})" if asked else None)
        if trouble is None and n.slurm is None:
            continue
        if trouble is None:
            out.append(Decision("clear", n.name, n.grp, f"Slurm: {sn.state}"))
            continue
        if trouble != n.slurm:
            out.append(Decision("mark", n.name, n.grp, trouble))
        if asked:
            if sn.busy:  # FAILING: HyperPod waits for the node's jobs; `state=down` would kill them
                out.append(Decision("wait", n.name, n.grp, f"{sn.reason}: waiting for the jobs on it to end"))
            else:
                out.append(Decision(asked, n.name, n.grp, f"Slurm reason {sn.reason!r} (set by a user)", by_user=True))
            continue
        if recovery != "Automatic" or not sn.down or g.protected:
            continue  # NodeRecovery None, a FAIL for the user's own reasons, a protected group: shown only
        since = n.slurm_since if n.slurm_since is not None else now
        if now - since < recover_after_s:
            continue
        step = LADDER[min(n.repairs, len(LADDER) - 1)]
        out.append(Decision(step, n.name, n.grp, f"{trouble} for {now - since:.0f} s (recovery step "
                                                   f"{min(n.repairs, 2) + 1} of 3: {step})"))
    return out


def count_failure(g, now: float, protect_after: int = PROTECT_AFTER,
                  window_s: float = PROTECT_WINDOW_S) -> tuple[int, bool]:
    """A node of group `g` failed (or was recovered by reboot / replace): (its new count in a row,
    whether the group is now to be protected)."""
    n = 1 if g.failed_at is None or now - g.failed_at > window_s else g.failures + 1
    return n, g.protected is None and n >= protect_after
