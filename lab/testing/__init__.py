"""A lab cluster for tests (issue 46, docs/verification.md): the parts of the pytest plugin
(lab/pytest_plugin.py, entry point `pytest11: slurmlab`).

- cluster.py: `LabCluster`, a cluster by name: run a command on a node (as a user), submit a batch job,
  a testinfra host, a boto3 client, checkpoint and reset;
- jobs.py: `Job`, a batch job: wait for it, its state, its output, its record in Slurm accounting;
- served.py: `slurmlab serve` on the lab's home, for the boto3 client.

The project's own e2e suite (tests/e2e/labcli.py) runs its commands through these classes."""
