import pytest


@pytest.mark.slurm_cluster(spec="../cluster.yaml")  # made once, or the running one reused
def test_a_job_runs_on_two_nodes(slurm_cluster):
    job = slurm_cluster.sbatch("#!/bin/sh\nsrun hostname\n", nodes=2, ntasks_per_node=1)
    assert job.wait(timeout=300) == "COMPLETED"
    assert len(set(job.output.split())) == 2
    assert job.record()["NodeList"]
