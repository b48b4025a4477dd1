"""Cluster specs the unit tests share (YAML text, so their problems have lines to point at)."""

BASE = """\
ClusterName: demo
InstanceGroups:
  - InstanceGroupName: controller
    InstanceType: ml.t3.medium
    InstanceCount: 1
    SlurmConfig: {NodeType: Controller}
  - InstanceGroupName: compute
    InstanceType: ml.c5.large
    InstanceCount: 2
    SlurmConfig: {NodeType: Compute}
"""

LOGIN = """\
  - InstanceGroupName: login
    InstanceType: ml.t3.medium
    InstanceCount: 1
    SlurmConfig: {NodeType: Login}
"""

GPU = """\
  - InstanceGroupName: gpu
    InstanceType: ml.g5.12xlarge
    InstanceCount: 1
    SlurmConfig: {NodeType: Compute}
"""


def with_compute(count: int, text: str = BASE) -> str:
    """`text` with the compute group's InstanceCount set to `count` (lines stay where they are)."""
    old = "  - InstanceGroupName: compute\n    InstanceType: ml.c5.large\n    InstanceCount: 2\n"
    assert old in text
    return text.replace(old, old.replace("InstanceCount: 2", f"InstanceCount: {count}"), 1)
