# A run-only ReFrame check for a slurmlab cluster (docs/verification.md, "A regression suite: ReFrame"):
# `hostname` as a Slurm job on two compute nodes, one task each; it passes when two different hostnames
# come back. On the login node, with the configuration `slurmlab reframe-config NAME --install` wrote:
#   reframe -C /etc/slurmlab/reframe/NAME.py -c hello.py -r
import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_after, sanity_function


@rfm.simple_test
class hello_nodes(rfm.RunOnlyRegressionTest):
    descr = 'hostname on two compute nodes, one task each'
    valid_systems = ['*']          # every partition (--system=NAME:PARTITION picks one)
    valid_prog_environs = ['gnu']
    executable = 'hostname'
    num_tasks = 2
    num_tasks_per_node = 1
    time_limit = '5m'
    tags = {'slurmlab'}

    @run_after('setup')
    def needs_two_nodes(self):
        # the partition's running nodes when the configuration was written
        nodes = self.current_partition.extras.get('num_nodes', 0)
        self.skip_if(nodes < 2, f'{self.current_partition.fullname} has {nodes} node(s), the check needs 2')

    @sanity_function
    def two_hosts(self):
        names = sn.extractall(r'^(\S+)\s*$', self.stdout, 1)
        return sn.all([sn.assert_eq(sn.count(names), 2), sn.assert_eq(sn.count_uniq(names), 2)])
