#!/bin/sh
# Emulated GPUs (tasks/compute.yml): character devices /dev/nvidia0..N-1 (NVIDIA's major 195) made
# now and at every boot by systemd-tmpfiles. Needs install_if_changed. Arguments: the number of
# GPUs, the tmpfiles.d file. Prints "slurmlab-gpus changed: ..." when it changed something.
n="$1" f="$2" i=0 text="# Managed by slurmlab: emulated GPUs (device files only) for Slurm's gres.conf"
while [ "$i" -lt "$n" ]; do text="$text
c /dev/nvidia$i 0666 root root - 195:$i"; i=$((i + 1)); done
if [ "$n" -eq 0 ]; then
  [ -e "$f" ] || exit 0
  rm -f "$f" /dev/nvidia[0-9]*; echo "slurmlab-gpus changed: removed"; exit 0
fi
install_if_changed "$f" <<EOT
$text
EOT
case $? in 0) ;; 1) [ ! -e "/dev/nvidia$((n - 1))" ] || exit 0 ;; *) exit 1 ;; esac
systemd-tmpfiles --create "$f" || exit 1
echo "slurmlab-gpus changed: $n devices"
