"""The cluster spec: HyperPod's CreateCluster request for a Slurm cluster, checked for a lab.

    from lab.spec import load_spec
    spec = load_spec("examples/cluster.yaml")
    spec.controller_group.node_type          # "Controller"
    spec.node_names("compute")               # ["demo-compute-1", "demo-compute-2"]
    Catalog.load().size("ml.c5.large")        # VmSize(vcpus=1, memory_mib=768, source="default")

See docs/spec.md.
"""

import importlib

# What each name is (the submodule that defines it), imported when first asked for: a command that
# needs one spec module (e.g. `slurmlab ssh`, through lab.spec.extensions) does not pay for botocore's
# service model and the rules.
_FROM = {
    **dict.fromkeys(("DEFAULTS", "GPUS", "RULE", "Catalog", "VmSize", "check_instance_type", "gpu_count",
                     "load_catalog", "rule_size"), "catalog"),
    **dict.fromkeys(("apply_update", "check_update", "load_spec", "loads_spec", "spec_from_request",
                     "with_instance_count", "with_lab", "with_users"), "load"),
    **dict.fromkeys(("ClusterInstanceGroupSpecification", "ClusterInstanceRequirements", "ClusterLifeCycleConfig",
                     "ClusterOrchestrator", "ClusterOrchestratorSlurmConfig", "ClusterSlurmConfig", "ClusterSpec",
                     "LabConfig", "LabUsers", "group_gpus"), "models"),
    **dict.fromkeys(("Problem", "SpecInvalid"), "problems"),
    **dict.fromkeys(("DEFAULT_MAX_NODES_PER_GROUP", "DEFAULT_PARTITION", "MAX_NODES_ENV", "max_nodes_per_group"),
                    "rules"),
    "instance_types": "servicemodel",
}


def __getattr__(name: str):
    # INSTANCE_TYPES: HyperPod's instance types, read from botocore's model when first asked for.
    if name == "INSTANCE_TYPES":
        return __getattr__("instance_types")()
    if name == "InstanceGroup":  # short alias
        return __getattr__("ClusterInstanceGroupSpecification")
    if name in _FROM:
        value = getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Catalog",
    "ClusterInstanceGroupSpecification",
    "ClusterInstanceRequirements",
    "ClusterLifeCycleConfig",
    "ClusterOrchestrator",
    "ClusterOrchestratorSlurmConfig",
    "ClusterSlurmConfig",
    "ClusterSpec",
    "DEFAULTS",
    "GPUS",
    "DEFAULT_MAX_NODES_PER_GROUP",
    "DEFAULT_PARTITION",
    "INSTANCE_TYPES",
    "InstanceGroup",
    "LabConfig",
    "LabUsers",
    "MAX_NODES_ENV",
    "Problem",
    "RULE",
    "SpecInvalid",
    "VmSize",
    "apply_update",
    "check_update",
    "check_instance_type",
    "gpu_count",
    "group_gpus",
    "instance_types",
    "load_catalog",
    "load_spec",
    "loads_spec",
    "max_nodes_per_group",
    "rule_size",
    "spec_from_request",
    "with_instance_count",
    "with_lab",
    "with_users",
]
