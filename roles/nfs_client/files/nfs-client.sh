#!/bin/sh
# The shared folders in fstab (tasks/main.yml): the block between its markers if it differs, then
# the automount units started. Needs install_if_changed. Arguments: the block in base64, the mount
# points. Prints "slurmlab-nfs changed: ..." for what it changed.
block="$1"; shift
b='/^# BEGIN slurmlab shared folders$/' e='/^# END slurmlab shared folders$/'
want=$(echo "$block" | base64 -d) || exit 1
units=""
# the block alone is compared: vagrant up, finishing in the background, rewrites fstab
# around it (its own #VAGRANT-BEGIN block), which changes the order but not the mounts
if [ "$(sed -n "$b,${e}p" /etc/fstab)" != "$want" ]; then
  [ -r /etc/fstab ] || exit 1
  { sed "$b,${e}d" /etc/fstab && printf '%s\n' "$want"; } | install_if_changed /etc/fstab 0644
  case $? in 0 | 1) ;; *) exit 1 ;; esac
  echo "slurmlab-nfs changed: /etc/fstab"
  for p in "$@"; do mkdir -p "$p"; done
  systemctl daemon-reload || exit 1
fi
for p in "$@"; do u="$(systemd-escape --path "$p").automount"; units="$units $u"; done
for u in $units; do
  if [ "$(systemctl is-active "$u")" != active ]; then
    systemctl start "$u" || exit 1
    echo "slurmlab-nfs changed: $u started"
  fi
done
