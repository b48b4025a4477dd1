"""A site's own checks, run beside slurmlab's built-in ones (docs/verify.md, "Your own checks"):

    slurmlab verify demo --tests examples/verify-tests

They pass on a cluster of examples/cluster.yaml or examples/workshop.yaml (whose gpu group has a partition of
its own)."""


def test_the_default_partition_is_ours_and_every_compute_node_has_one(cluster, sinfo, partition):
    nowhere = [cluster.slurm_name(n) for n in cluster.compute
               if not sinfo.get(cluster.slurm_name(n), {}).get("partitions")]
    assert not nowhere, f"in no partition: {nowhere}"
    record = cluster.out(cluster.controller, f"scontrol --oneliner show partition {partition}")
    assert "Default=YES" in record, f"{partition} is not the default partition: {record}"
    assert any(partition in sinfo.get(cluster.slurm_name(n), {}).get("partitions", ()) for n in cluster.compute), \
        f"no compute node in {partition}"


def test_chrony_follows_the_controller(cluster, node):
    host = cluster.host(node)  # a testinfra host: its modules (service, file, package...) as usual
    assert host.service("chrony").is_running, f"chrony is not running on {node}"
    want = "local stratum" if node in cluster.controllers else "server slurmlab-controller"
    assert want in host.file("/etc/chrony/chrony.conf").content_string, f"{node}: chrony.conf has no '{want}'"
