"""Your folder may have its own conftest.py, as in any pytest project: here, one setting of the site.
The fixtures of slurmlab's suite (cluster, sinfo, node, compute, login, non_controller) come
without it."""

import pytest


@pytest.fixture(scope="session")
def partition() -> str:
    """Slurm's default partition at this site (examples/cluster.yaml and workshop.yaml: dev)."""
    return "dev"
