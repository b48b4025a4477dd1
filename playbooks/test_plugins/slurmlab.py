"""The roles' shared checks, once: what a Slurm node name may look like (a DNS label, as the lab
names nodes <cluster>-<group>-<n>)."""

from __future__ import annotations

import re

NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def node_name(value) -> bool:
    """`x is a_node_name`, `names | reject("a_node_name")`."""
    return isinstance(value, str) and NODE_NAME.match(value) is not None


class TestModule:
    def tests(self):
        return {"a_node_name": node_name}
