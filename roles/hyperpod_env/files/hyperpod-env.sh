# shellcheck shell=sh
# hyperpod-env.sh TYPE RESOURCE_CONFIG_B64 USER UID LOG_DIR SLURMD_UNIT_B64 ENVSUBST_B64
# Make this node look like a SageMaker HyperPod node to lifecycle scripts (role hyperpod_env).
# TYPE: controller | login | compute. Prints "hyperpod-env changed" when it changed something.
# install_if_changed (roles/common/files/install-if-changed.sh) is put in front of this text.
set -u
type=$1 config=$2 user=$3 uid=$4 logdir=$5 unit=$6 envsubst=$7
changed=0
put() {  # put FILE MODE: standard input becomes FILE if it differs
  install_if_changed "$1" "$2" root:root
  case $? in 0) changed=1 ;; 1) ;; *) echo "hyperpod-env: cannot write $1" >&2; exit 1 ;; esac
}
link() {  # link TARGET NAME
  [ "$(readlink "$2" 2>/dev/null)" = "$1" ] && return 0
  ln -sfn "$1" "$2" && changed=1
}

for d in /opt/ml/config /opt/sagemaker_cluster "$logdir" /opt/slurm /opt/slurm/bin /opt/slurm/sbin; do
  [ -d "$d" ] || { mkdir -p "$d" && changed=1; }
done
echo "$config" | base64 -d | put /opt/ml/config/resource_config.json 0644

# /opt/slurm: HyperPod's prefix, here links into Debian's packages (etc is /etc/slurm).
link /etc/slurm /opt/slurm/etc
for f in $(dpkg -L slurm-client 2>/dev/null | grep -E '^/usr/bin/[^/]+$'); do link "$f" "/opt/slurm/bin/${f##*/}"; done
# the daemons are Debian alternatives (/usr/sbin/slurmd -> slurmd-wlm): link the names
for f in slurmctld slurmd slurmdbd slurmstepd sackd slurmrestd; do
  if [ -e "/usr/sbin/$f" ]; then link "/usr/sbin/$f" "/opt/slurm/sbin/$f"; fi
done
# shellcheck disable=SC2016
echo 'PATH="/opt/slurm/bin:/opt/slurm/sbin:$PATH"' | put /etc/profile.d/hyperpod-slurm.sh 0644

# envsubst: lifecycle scripts fill templates with it (a stand-in when gettext-base is absent).
if ! command -v envsubst >/dev/null 2>&1 || [ -f /usr/local/bin/envsubst ]; then
  echo "$envsubst" | base64 -d | put /usr/local/bin/envsubst 0755
fi

# HyperPod's default user: a sudoer without a password.
if ! getent passwd "$user" >/dev/null; then
  home=no; [ "$type" = controller ] && home=yes
  if [ "$home" = yes ]; then useradd -m -u "$uid" -s /bin/bash "$user"; else useradd -M -d "/home/$user" -u "$uid" -s /bin/bash "$user"; fi \
    || { echo "hyperpod-env: cannot add user $user" >&2; exit 1; }
  changed=1
fi
echo "$user ALL=(ALL) NOPASSWD:ALL" | put "/etc/sudoers.d/90-hyperpod-$user" 0440

if [ "$type" = controller ]; then
  # slurm.conf includes it (as HyperPod's does); accounting set-up scripts append to it.
  [ -e /etc/slurm/accounting.conf ] || { : > /etc/slurm/accounting.conf && changed=1; }
else
  # The slurmd unit of a HyperPod node, written once: lifecycle scripts edit it in place (envsubst).
  if [ ! -e /etc/systemd/system/slurmd.service ]; then
    echo "$unit" | base64 -d > /etc/systemd/system/slurmd.service && systemctl daemon-reload && changed=1
  fi
fi
[ "$changed" = 1 ] && echo "hyperpod-env changed"
exit 0
