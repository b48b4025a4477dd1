#!/bin/sh
# The probe (tasks/probe.yml): everything the roles common, munge, slurm_node and slurm_controller
# decide on, as key=value lines. Arguments: the node's name, the cluster's name, chrony's
# configuration file, the srun --auto-resume wrapper.
# Few processes: each one costs ~0.2 s under emulation (builtins cost nothing).
c="$2" chrony="$3" srun="$4"  # ($1, the node's name: the Ansible host compares it)
read -r h < /proc/sys/kernel/hostname; echo "hostname=$h"
eh=""; [ ! -r /etc/hostname ] || read -r eh < /etc/hostname || true; echo "etc_hostname=$eh"
sed -n -e '/^127\.0\.1\.1[[:space:]]/s/^/loopback_line=/p' \
  -e "/^# BEGIN slurmlab cluster $c\$/,/^# END slurmlab cluster $c\$/s/^/hosts_block=/p" /etc/hosts
files=""
for k in munge_key slurmd sackd slurm_conf cgroup_conf gres_conf chrony auto_resume slurmdbd_conf; do echo "${k}_sha=absent"; done
for f in /etc/munge/munge.key /etc/default/slurmd /etc/default/sackd /etc/slurm/slurm.conf /etc/slurm/cgroup.conf /etc/slurm/gres.conf \
  "$chrony" "$srun" /etc/slurm/slurmdbd.conf; do
  [ ! -f "$f" ] || files="$files $f"
done
# shellcheck disable=SC2086 # $files: the list of paths (none has a space)
[ -z "$files" ] || sha256sum $files | while read -r s f; do
  case "$f" in
    */munge.key) echo "munge_key_sha=$s" ;; */default/slurmd) echo "slurmd_sha=$s" ;;
    */default/sackd) echo "sackd_sha=$s" ;; */slurm.conf) echo "slurm_conf_sha=$s" ;;
    */cgroup.conf) echo "cgroup_conf_sha=$s" ;; */gres.conf) echo "gres_conf_sha=$s" ;;
    "$chrony") echo "chrony_sha=$s" ;; "$srun") echo "auto_resume_sha=$s" ;;
    */slurmdbd.conf) echo "slurmdbd_conf_sha=$s" ;;
  esac
done
# shellcheck disable=SC2086 # $b below: the unit's Key=Value words
{ systemctl show --property=Id --property=LoadState --property=ActiveState --property=Restart \
    munge slurmd sackd slurmctld chrony mariadb slurmdbd; echo; } | while IFS= read -r l; do
  case "$l" in
    "") for x in $b; do echo "${u}_$x"; done; b="" ;;
    Id=*) u=${l#Id=}; u=${u%.service} ;;
    *) b="$b $l" ;;
  esac
done
# Enabled or not, read from the unit files themselves: `systemctl show`'s UnitFileState is what systemd
# read at its last load of the unit, and a `systemctl enable --no-reload` (the roles') does not change it
# until a daemon-reload, which the roles no longer make where nothing else needs one (issue 42)
systemctl list-unit-files --no-legend munge.service slurmd.service sackd.service slurmctld.service mariadb.service \
  slurmdbd.service 2>/dev/null \
  | while read -r n st _; do echo "${n%.service}_UnitFileState=$st"; done
echo "statesave=$(stat -c %U:%a /var/lib/slurm/slurmctld 2>/dev/null || echo absent)"
r=no; [ ! -e /etc/slurm/.slurmlab-reconfigure-owed ] || r=yes; echo "reconfigure_owed=$r"
l=no; [ ! -r /var/lib/slurmlab/lifecycle-on-create.done ] || read -r l < /var/lib/slurmlab/lifecycle-on-create.done || true
echo "lifecycle_done=${l:-no}"  # playbooks/lifecycle.yml writes it
s="none: no boot-time setup"; [ ! -r /run/slurmlab/node-setup.status ] || read -r s < /run/slurmlab/node-setup.status || true
echo "boot_setup=$s"
a=absent; [ ! -r /var/lib/slurmlab/accounting-db.done ] || read -r a < /var/lib/slurmlab/accounting-db.done || true
echo "accounting_db=$a"  # roles/accounting's marker: the database and its user exist
# every mount point, one line (roles/state_disk: its disk and folders mounted already, nothing to run)
echo "mounts= $(findmnt -rn -o TARGET | tr '\n' ' ')"
# roles/nfs_client's marker: the arguments of its last run, then its automounts (their states here)
n=absent nu=""; [ ! -r /var/lib/slurmlab/nfs-client.done ] || { read -r n; read -r nu; } < /var/lib/slurmlab/nfs-client.done || true
echo "nfs_client=$n"
# shellcheck disable=SC2086 # $nu: unit names
echo "nfs_automounts=$([ -z "$nu" ] || systemctl is-active $nu | tr '\n' ' ')"
