"""Checkpoints of simulated clusters (a mixin of lab.providers.sim.SimProvider): the simulated VMs
and the engine's record in `<cluster folder>/checkpoints/<tag>.json`. No memory, no disks: a restore
puts the set of simulated VMs back (added ones go, removed ones come back running). Labelled
simulated in what it returns."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

from lab.providers.base import CheckpointError
from lab.workspace import ClusterDir


def _folder(cluster: str) -> Path:
    return ClusterDir(cluster).root / "checkpoints"


class SimCheckpoints:
    VM: type  # the provider's record of a simulated VM (lab.providers.sim.SimVM)

    def checkpoint(self, cluster: str, tag: str, record: dict) -> dict:
        f = _folder(cluster) / f"{tag}.json"
        if f.exists():
            raise CheckpointError(f"cluster {cluster} already has a checkpoint '{tag}'")
        with self._lock:
            vms = {n: dataclasses.asdict(vm) for n, vm in self.vms.get(cluster, {}).items()}
        if not vms:
            raise CheckpointError(f"cluster {cluster} has no VM to checkpoint")
        f.parent.mkdir(parents=True, exist_ok=True)
        data = {"tag": tag, "created": time.time(), "record": record, "vms": vms, "simulated": True}
        f.write_text(json.dumps(data))
        return {"tag": tag, "created": data["created"], "size": f.stat().st_size, "nodes": sorted(vms),
                "timings": {"total": 0.0}, "simulated": True}

    def _read(self, cluster: str, tag: str) -> dict:
        f = _folder(cluster) / f"{tag}.json"
        if not f.exists():
            have = ", ".join(c["tag"] for c in self.checkpoints(cluster)) or "none"
            raise CheckpointError(f"cluster {cluster} has no checkpoint '{tag}' (its checkpoints: {have})")
        return json.loads(f.read_text())

    def restore(self, cluster: str, tag: str) -> dict:
        data = self._read(cluster, tag)
        with self._lock:
            now = self.vms.setdefault(cluster, {})
            for n in [n for n in now if n not in data["vms"]]:
                now.pop(n)
                self._drop(cluster, n)
            for n, v in data["vms"].items():
                vm = self.VM(**{**v, "state": "running", "ready_at": min(v["ready_at"], self.clock())})
                now[n] = vm
                self._save(vm)
        return {"record": data["record"], "timings": {"total": 0.0}, "simulated": True}

    def checkpoints(self, cluster: str) -> list[dict]:
        out = []
        for f in sorted(_folder(cluster).glob("*.json")) if _folder(cluster).exists() else []:
            data = json.loads(f.read_text())
            out.append({"tag": data["tag"], "created": data["created"], "size": f.stat().st_size,
                        "nodes": sorted(data["vms"]), "simulated": True})
        return sorted(out, key=lambda c: c["created"])

    def delete_checkpoint(self, cluster: str, tag: str) -> None:
        self._read(cluster, tag)
        (_folder(cluster) / f"{tag}.json").unlink()

    async def checkpoint_async(self, cluster: str, tag: str, record: dict) -> dict:
        out = self.checkpoint(cluster, tag, record)
        await asyncio.sleep(0)
        return out

    async def restore_async(self, cluster: str, tag: str) -> dict:
        out = self.restore(cluster, tag)
        await asyncio.sleep(0)
        return out
