#!/bin/bash
# start_slurm.sh ROLE [CONTROLLER_ADDRESS]: start this node's Slurm daemon, as HyperPod's scripts do:
# slurmctld on the controller; on a compute node slurmd, pointed at the controller by filling the
# unit's $SLURMD_OPTIONS. A login node runs the lab's sackd (started by the lab): nothing here.
set -euo pipefail
role=$1
case $role in
  controller)
    systemctl enable --now slurmctld
    ;;
  compute)
    unit=/etc/systemd/system/slurmd.service
    SLURMD_OPTIONS="--conf-server $2" envsubst < "$unit" > /tmp/slurmd.service
    mv /tmp/slurmd.service "$unit"
    systemctl daemon-reload
    systemctl enable --now slurmd
    ;;
  login) echo "login node: nothing to start" ;;
  *) echo "unknown role $role" >&2; exit 2 ;;
esac
echo "started Slurm for $role"
