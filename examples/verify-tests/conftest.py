"""Your folder may have its own conftest.py, as in any pytest project: here, one setting of the site.
The fixtures of slurmlab's suite (cluster, sinfo, node, compute, login, non_controller) come
without it."""

import pytest


@pytest.fixture(scope="session")
def partition() -> str:
    """The partition every compute node must be in, Slurm's default (examples/cluster.yaml: dev)."""
    return "dev"
