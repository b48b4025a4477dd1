"""The picture of a cluster_timeline result: one bar per node, its phases in colour.

One panel (a block of bars) per way of building: warm (the engine, nodes forked from templates),
cold (the engine, nodes booted by `vagrant up`), naive, and "continuous" in results from before the
warm/cold split; the same time axis (seconds from create); in each a bar per node (controller, login,
compute), segments launch / boot / configure / join (bench/phases.py defines them; blank = waiting;
a fork's boot is its fork, identity and first ssh), and vertical lines at InService, the first job
and full size. matplotlib with the Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path

PHASES = ("launch", "boot", "configure", "join")
COLORS = {"launch": "#a8b3bd", "boot": "#f4a259", "configure": "#3d9970", "join": "#7b4ab8"}
MODES = (("continuous", "continuous provisioning (the engine)"),
         ("warm", "warm: continuous provisioning (the engine), every node forked from a saved template"),
         ("cold", "cold: continuous provisioning (the engine), every node booted by vagrant up"),
         ("naive", "naive: one vagrant up, one Ansible run (site.yml), then the first job"))
TITLE_RATIOS = (("time_to_first_job_warm_over_naive", "first job warm/naive"),
                ("time_to_first_job_warm_over_cold", "first job warm/cold"),
                ("time_to_full_size_warm_over_naive", "full size warm/naive"),
                ("time_to_full_size_warm_over_cold", "full size warm/cold"),
                ("warm_scale_out_request_to_running_over_cold_boot_to_ssh", "warm scale-out request->Running / cold boot"),
                ("warm_fork_request_to_ssh_over_cold_boot_to_ssh", "fork request->ssh / cold boot"),
                # results from before the warm/cold split
                ("time_to_first_job_continuous_over_naive", "first job continuous/naive"),
                ("time_to_full_size_continuous_over_naive", "full size continuous/naive"),
                ("join_latency_over_boot_to_ssh", "join latency / one VM's boot"))
MARKERS = (("time_to_inservice_s", "InService", (0, (5, 3))),
           ("time_to_first_job_s", "first job", "solid"),
           ("time_to_full_size_s", "full size", (0, (1, 2))))
RANK = {"Controller": 0, "Login": 1, "Compute": 2}


def _order(phases: dict, types: dict) -> list[str]:
    return sorted(phases, key=lambda n: (RANK.get(types.get(n, ""), 3), n))


def _title(result: dict) -> str:
    """The spec, the driver and the ratios the result has, three to a line."""
    r = result.get("ratios") or {}
    head = "   ".join(p for p in (result.get("spec", ""), f"driver {result['driver']}" if result.get("driver") else "") if p)
    parts = [f"{label} {r[k]}" for k, label in TITLE_RATIOS if r.get(k) is not None]
    lines = [head] + ["   ".join(parts[i:i + 3]) for i in range(0, len(parts), 3)]
    return "\n".join(x for x in lines if x)


def draw(result: dict, path: Path) -> list[str]:
    """Write the PNG; return the bars drawn, top to bottom, as "mode/node"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    modes = [(k, t) for k, t in MODES if isinstance(result.get(k), dict) and result[k].get("phases")]
    if not modes:
        raise ValueError("no per-node phases in this result (it predates the timeline picture, "
                         "or every way failed)")
    rows = [len(result[k]["phases"]) for k, _ in modes]
    title = _title(result)
    height = 1.6 + 0.42 * sum(rows) + 0.9 * len(modes) + 0.18 * title.count("\n")
    fig, axes = plt.subplots(len(modes), 1, sharex=True, squeeze=False, figsize=(11, height),
                             gridspec_kw={"height_ratios": [max(r, 1) + 1.2 for r in rows]})
    bars: list[str] = []
    xmax = 0.0
    for ax, (key, heading) in zip(axes[:, 0], modes):
        data = result[key]
        order = _order(data["phases"], data.get("node_types") or {})
        for y, node in enumerate(order):
            for ph in PHASES:
                seg = data["phases"][node].get(ph)
                if seg and seg[1] > seg[0]:
                    ax.barh(y, seg[1] - seg[0], left=seg[0], height=0.6, color=COLORS[ph],
                            edgecolor="white", linewidth=0.6)
                    xmax = max(xmax, seg[1])
            bars.append(f"{key}/{node}")
        ax.set_yticks(range(len(order)), order, fontsize=9)
        ax.set_ylim(len(order) - 0.4, -1.6)  # top to bottom, room above the first bar for the labels
        for i, (field, label, style) in enumerate(MARKERS):
            t = data.get(field)
            if t is None:
                continue
            ax.axvline(t, color="#222222", linestyle=style, linewidth=1.1)
            ax.text(t, -1.3 + 0.35 * i, f" {label} {t:.0f} s", fontsize=8, va="center", ha="left")  # one line each
            xmax = max(xmax, t)
        if data.get("forked") is not None and data.get("nodes"):
            heading += f" ({data['forked']} of {data['nodes']} nodes forked)"
        ax.set_title(heading, loc="left", fontsize=10)
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
    axes[-1, 0].set_xlabel("seconds from create")
    axes[-1, 0].set_xlim(0, xmax * 1.12 + 1)  # room for the last marker's label
    handles = [Patch(color=COLORS[p], label=p) for p in PHASES]
    handles += [Line2D([], [], color="#222222", linestyle=s, label=lab) for _, lab, s in MARKERS]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1 - (0.06 + 0.15 * (title.count("\n") + 1)) / height))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return bars
