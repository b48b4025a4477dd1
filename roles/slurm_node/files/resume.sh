#!/bin/sh
# On the controller (tasks/slurmd.yml): resume node $1 if Slurm has it down with the lab's reason
# (slurmlab: ...) or a user's Action:Reboot / Action:Replace; any other reason is left as it is.
# Prints "slurmlab-resumed: <reason>" when it resumed the node.
r=$(sinfo --noheader --Node --nodes "$1" --format=%E | head -n 1)
case "$r" in slurmlab:*|Action:Reboot*|Action:Replace*)
  scontrol update nodename="$1" state=resume && echo "slurmlab-resumed: $r";; esac
