"""Render a cluster's Vagrantfile from Vagrantfile.j2 (pure: tested against a golden file)."""

from __future__ import annotations

from collections.abc import Sequence

import jinja2

from lab import paths
from lab.providers.base import ClusterNet, MachineSpec


def render(
    *,
    cluster: str,
    box: str,
    machines: Sequence[MachineSpec],
    net: ClusterNet,
    private_key: str,
    public_key: str,
    driver: str,
    emulator_path: str | None,
    pool: str,
    uri: str = "qemu:///system",
    boot_timeout: int = 600,
) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.resource())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    if any(c in public_key for c in ',"\n'):
        raise ValueError("public key must be one line without commas or quotes")
    return env.get_template("Vagrantfile.j2").render(
        cluster=cluster,
        box=box,
        nodes=sorted(machines, key=lambda m: m.name),
        network={"name": net.name, "cidr": net.cidr},
        private_key=private_key,
        public_key=public_key,
        driver=driver,
        emulator_path=emulator_path,
        pool=pool,
        uri=uri,
        boot_timeout=boot_timeout,
    )
