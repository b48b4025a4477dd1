"""slurmlab: real Slurm clusters from local VMs, provisioned the way SageMaker HyperPod does it."""

__version__ = "0.1.0"
