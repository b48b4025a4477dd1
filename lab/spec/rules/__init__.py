"""The lab's own rules, on top of HyperPod's model (lab.spec.contract), one module per area:

    names       ClusterName, InstanceGroupName, PartitionName as hostnames and Slurm names (STRING_HOOKS)
    lifecycle   LifeCycleConfig: a local folder (or a mirrored s3:// prefix) and its scripts
    cluster     the whole cluster: groups and their Slurm roles, counts, node names
    labkey      the lab's own key `Lab`: Box, Users, Gpus
"""

from .cluster import DEFAULT_MAX_NODES_PER_GROUP, MAX_NODES_ENV, check_cluster, max_nodes_per_group
from .labkey import (
    USER_PREFIX,
    USERS_MAX,
    check_lab,
    password_problem,
    user_count_problem,
    user_name_problem,
    user_names,
)
from .lifecycle import s3_mirror
from .names import DEFAULT_PARTITION, STRING_HOOKS

__all__ = [
    "DEFAULT_MAX_NODES_PER_GROUP",
    "DEFAULT_PARTITION",
    "MAX_NODES_ENV",
    "STRING_HOOKS",
    "USERS_MAX",
    "USER_PREFIX",
    "check_cluster",
    "check_lab",
    "max_nodes_per_group",
    "password_problem",
    "s3_mirror",
    "user_count_problem",
    "user_name_problem",
    "user_names",
]
