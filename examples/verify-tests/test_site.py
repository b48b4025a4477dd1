"""A site's own checks, run beside slurmlab's built-in ones (docs/verify.md, "Your own checks"):

    slurmlab verify demo --tests examples/verify-tests

They pass on a cluster of examples/cluster.yaml."""


def test_default_partition_holds_every_compute_node(cluster, sinfo, partition):
    outside = [cluster.slurm_name(n) for n in cluster.compute
               if partition not in sinfo.get(cluster.slurm_name(n), {}).get("partitions", ())]
    assert not outside, f"not in partition {partition}: {outside}"
    record = cluster.out(cluster.controller, f"scontrol --oneliner show partition {partition}")
    assert "Default=YES" in record, f"{partition} is not the default partition: {record}"


def test_chrony_follows_the_controller(cluster, node):
    host = cluster.host(node)  # a testinfra host: its modules (service, file, package...) as usual
    assert host.service("chrony").is_running, f"chrony is not running on {node}"
    want = "local stratum" if node in cluster.controllers else "server slurmlab-controller"
    assert want in host.file("/etc/chrony/chrony.conf").content_string, f"{node}: chrony.conf has no '{want}'"
