"""The cluster spec: HyperPod's CreateCluster request (Slurm), as pydantic models.

Field names are HyperPod's, spelled as in botocore's SageMaker service model; class names are the
model's shape names. Build them with `lab.spec.load_spec` / `spec_from_request`, which run every
check (service model + lab rules) and report all problems at once; constructing the classes
directly only checks types.

Fields the lab has no use for (ExecutionRole, VpcConfig, Tags, InstanceStorageConfigs, ...) are
kept as given, so the API can echo them back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, field_validator

from .catalog import gpu_count
from .rules import DEFAULT_PARTITION, USER_PREFIX, s3_mirror, user_names

SlurmNodeType = Literal["Controller", "Login", "Compute"]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ClusterSlurmConfig(_Shape):
    NodeType: SlurmNodeType
    PartitionNames: list[str] | None = None


class ClusterLifeCycleConfig(_Shape):
    SourceS3Uri: str | None = None
    OnCreate: str | None = None
    OnInitComplete: str | None = None

    @property
    def local_dir(self) -> Path | None:
        """The local folder of the scripts (absolute after validation; s3:// -> the lab's mirror)."""
        uri = self.SourceS3Uri
        if not uri:
            return None
        if uri.startswith("s3://"):
            p = urlparse(uri)
            return s3_mirror() / p.netloc / p.path.lstrip("/")
        if uri.startswith("file:"):
            p = urlparse(uri)
            return Path(unquote(p.path))
        return Path(uri)


class ClusterInstanceRequirements(_Shape):
    InstanceTypes: list[str]


class ClusterInstanceGroupSpecification(_Shape):
    InstanceGroupName: str
    InstanceCount: int
    MinInstanceCount: int | None = None
    InstanceType: str | None = None
    InstanceRequirements: ClusterInstanceRequirements | None = None
    SlurmConfig: ClusterSlurmConfig
    LifeCycleConfig: ClusterLifeCycleConfig | None = None
    ThreadsPerCore: int | None = None
    # Kept and echoed back; no meaning in a lab.
    ExecutionRole: str | None = None
    InstanceStorageConfigs: list[Any] | None = None
    OnStartDeepHealthChecks: list[str] | None = None
    TrainingPlanArn: str | None = None
    OverrideVpcConfig: dict[str, Any] | None = None
    ScheduledUpdateConfig: dict[str, Any] | None = None
    ImageId: str | None = None
    AutoPatchConfig: dict[str, Any] | None = None
    ImageReleaseVersion: str | None = None
    KubernetesConfig: dict[str, Any] | None = None
    CapacityRequirements: dict[str, Any] | None = None
    NetworkInterface: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.InstanceGroupName

    @property
    def node_type(self) -> SlurmNodeType:
        return self.SlurmConfig.NodeType

    @property
    def instance_types(self) -> list[str]:
        """InstanceType, or InstanceRequirements.InstanceTypes in priority order."""
        if self.InstanceType:
            return [self.InstanceType]
        return list(self.InstanceRequirements.InstanceTypes) if self.InstanceRequirements else []

    @property
    def instance_type(self) -> str:
        """The first (preferred) instance type."""
        return self.instance_types[0]

    @property
    def partition_name(self) -> str | None:
        """The Slurm partition of a Compute group (PartitionNames has at most one); `dev` if none is
        given. None for Controller and Login groups."""
        if self.node_type != "Compute":
            return None
        names = self.SlurmConfig.PartitionNames
        return names[0] if names else DEFAULT_PARTITION

    @property
    def lifecycle_dir(self) -> Path | None:
        return self.LifeCycleConfig.local_dir if self.LifeCycleConfig else None

    @property
    def on_create(self) -> Path | None:
        """The OnCreate script's path, if the group has one."""
        lc = self.LifeCycleConfig
        if lc is None or not lc.OnCreate or lc.local_dir is None:
            return None
        return lc.local_dir / lc.OnCreate


class ClusterOrchestratorSlurmConfig(_Shape):
    SlurmConfigStrategy: Literal["Overwrite", "Managed", "Merge"] | None = None
    AccountingDatabase: dict[str, Any] | None = None  # kept; the lab's slurmdbd is local


class ClusterOrchestrator(_Shape):
    Slurm: ClusterOrchestratorSlurmConfig


class LabUsers(_Shape):
    """`Lab.Users`: student accounts `<Prefix>01`..`<Prefix>NN` with one shared password (`Users: 20`
    is short for `Users: {Count: 20}`). No Password: the lab makes one of 4 words (lab/users.py)."""

    Count: int
    Prefix: str = USER_PREFIX
    Password: str | None = None

    @property
    def names(self) -> list[str]:
        """user01..user20 (3 digits when Count > 99)."""
        return user_names(self.Prefix, self.Count)


class LabConfig(_Shape):
    """The lab-only top-level key `Lab` (not part of HyperPod's API)."""

    Box: str | None = None  # the Vagrant box for every VM; None -> the lab's default box
    Users: LabUsers | None = None  # student accounts
    Gpus: dict[str, int] | None = None  # Compute group -> emulated GPUs per node (default: the type's real count)
    Start: Literal["Warm", "Cold"] | None = None  # Warm (default): forked from a saved template; Cold: booted
    # HyperPod: nodes look like HyperPod's (resource_config.json, /opt/slurm, the lifecycle scripts start
    # Slurm: docs/hyperpod-nodes.md); Lab (default unless a lifecycle folder holds provisioning_parameters.json)
    NodeEnvironment: Literal["Lab", "HyperPod"] | None = None
    Jupyter: bool | None = None  # JupyterHub on the login nodes, notebooks as Slurm jobs (issue 31)
    # false: no node is forked from a role template; each is forked from its box's plain template and
    # fully configured (a verification run of the roles' whole path; docs/adr/0022)
    RoleTemplates: bool | None = None

    @field_validator("Users", mode="before")
    @classmethod
    def _users_shorthand(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"Count": value}
        return value


class ClusterSpec(_Shape):
    """A cluster: CreateClusterRequest's members (Slurm-orchestrated) plus the lab's `Lab` key."""

    ClusterName: str
    InstanceGroups: list[ClusterInstanceGroupSpecification]
    NodeProvisioningMode: Literal["Continuous"] | None = None
    NodeRecovery: Literal["Automatic", "None"] | None = None
    Orchestrator: ClusterOrchestrator | None = None
    # Kept and echoed back; no meaning in a lab.
    RestrictedInstanceGroups: list[Any] | None = None
    RestrictedInstanceGroupsConfig: dict[str, Any] | None = None
    VpcConfig: dict[str, Any] | None = None
    Tags: list[Any] | None = None
    TieredStorageConfig: dict[str, Any] | None = None
    ClusterRole: str | None = None
    AutoScaling: dict[str, Any] | None = None
    # The lab's own settings.
    Lab: LabConfig | None = None

    # --- helpers for the engine ----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.ClusterName

    @property
    def is_continuous(self) -> bool:
        """NodeProvisioningMode: Continuous. Absent means the legacy mode (all or nothing, rollback)."""
        return self.NodeProvisioningMode == "Continuous"

    @property
    def node_recovery(self) -> str:
        """NodeRecovery; absent is taken as "Automatic" (the lab's choice: the model gives no default)."""
        return self.NodeRecovery or "Automatic"

    @property
    def slurm_config_strategy(self) -> str:
        """Orchestrator.Slurm.SlurmConfigStrategy; absent is taken as "Managed" (the lab's choice)."""
        if self.Orchestrator and self.Orchestrator.Slurm.SlurmConfigStrategy:
            return self.Orchestrator.Slurm.SlurmConfigStrategy
        return "Managed"

    @property
    def box(self) -> str | None:
        return self.Lab.Box if self.Lab else None

    @property
    def node_environment(self) -> str:
        """Lab.NodeEnvironment: "HyperPod" or "Lab" (the default; the spec rules set HyperPod when a
        lifecycle folder holds provisioning_parameters.json)."""
        return (self.Lab.NodeEnvironment if self.Lab else None) or "Lab"

    @property
    def users(self) -> LabUsers | None:
        """Lab.Users: the student accounts asked for at creation, or None."""
        return self.Lab.Users if self.Lab else None

    def gpus(self, group: str | ClusterInstanceGroupSpecification) -> int:
        """Emulated GPUs per node of a group: Lab.Gpus's entry, else the instance type's real count
        for a Compute group; 0 for Controller and Login groups and for types without GPUs."""
        g = self.group(group) if isinstance(group, str) else group
        if g.node_type != "Compute":
            return 0
        asked = (self.Lab.Gpus or {}).get(g.InstanceGroupName) if self.Lab else None
        return asked if asked is not None else gpu_count(g.instance_type)

    def group(self, name: str) -> ClusterInstanceGroupSpecification:
        for g in self.InstanceGroups:
            if g.InstanceGroupName == name:
                return g
        raise KeyError(name)

    @property
    def controller_group(self) -> ClusterInstanceGroupSpecification:
        return next(g for g in self.InstanceGroups if g.node_type == "Controller")

    @property
    def login_groups(self) -> list[ClusterInstanceGroupSpecification]:
        """At most one (a list so callers need not special-case its absence)."""
        return [g for g in self.InstanceGroups if g.node_type == "Login"]

    @property
    def login_group(self) -> ClusterInstanceGroupSpecification | None:
        return next(iter(self.login_groups), None)

    @property
    def compute_groups(self) -> list[ClusterInstanceGroupSpecification]:
        return [g for g in self.InstanceGroups if g.node_type == "Compute"]

    def node_name(self, group: str | ClusterInstanceGroupSpecification, n: int) -> str:
        """`<ClusterName>-<InstanceGroupName>-<n>`, n from 1: hostname, Slurm NodeName, VM name."""
        gname = group if isinstance(group, str) else group.InstanceGroupName
        return f"{self.ClusterName}-{gname}-{n}"

    def node_names(self, group: str | ClusterInstanceGroupSpecification) -> list[str]:
        """The names of nodes 1..InstanceCount of a group."""
        g = self.group(group) if isinstance(group, str) else group
        return [self.node_name(g, n) for n in range(1, g.InstanceCount + 1)]

    @property
    def partitions(self) -> dict[str, list[str]]:
        """Slurm partition -> the Compute groups in it, in spec order."""
        out: dict[str, list[str]] = {}
        for g in self.compute_groups:
            out.setdefault(g.partition_name, []).append(g.InstanceGroupName)
        return out

    @property
    def default_partition(self) -> str | None:
        """The partition of the first Compute group (Slurm's Default=YES); None without compute groups."""
        return next(iter(self.partitions), None)

    def to_request(self) -> dict[str, Any]:
        """The CreateCluster request body (no `Lab`), as boto3 would send it."""
        return self.model_dump(exclude_none=True, exclude={"Lab"})

    def to_dict(self) -> dict[str, Any]:
        """Everything, `Lab` included: what `spec_from_request` takes back (e.g. from the store)."""
        return self.model_dump(exclude_none=True)


def group_gpus(spec: dict[str, Any], groups: list[tuple[str, str, str]]) -> dict[str, int]:
    """Emulated GPUs per node of each (name, node type, instance type) group of a stored spec
    (`ClusterSpec.to_dict()`): `ClusterSpec.gpus`, and for a group gone from the spec (being
    deleted) the real count of its type when it is a Compute group."""
    model = ClusterSpec.model_validate(spec)
    named = {g.InstanceGroupName for g in model.InstanceGroups}
    return {name: model.gpus(name) if name in named else (gpu_count(itype) if node_type == "Compute" else 0)
            for name, node_type, itype in groups}
