#!/bin/sh
# The NFS exports (tasks/main.yml): the directories, the exports file if it differs, nfs-server
# enabled and running, exportfs -r after a change. Needs install_if_changed. Arguments: the exports
# file, its text in base64, then PATH=MODE per exported directory.
# Prints "slurmlab-nfs changed: ..." for what it changed.
f="$1" text="$2"; shift 2
for a in "$@"; do
  d="${a%%=*}" m="${a#*=}"
  [ -d "$d" ] || { mkdir -p "$d" && echo "slurmlab-nfs changed: created $d"; } || exit 1
  chmod "$m" "$d" || exit 1
done
mkdir -p "${f%/*}"
new=""
echo "$text" | base64 -d | install_if_changed "$f"
case $? in 0) new=1; echo "slurmlab-nfs changed: $f" ;; 1) ;; *) exit 1 ;; esac
if [ "$(systemctl is-active nfs-server)" != active ] || [ "$(systemctl is-enabled nfs-server)" != enabled ]; then
  { SYSTEMCTL_SKIP_SYSV=1 systemctl enable nfs-server --no-reload && systemctl start nfs-server; } || exit 1
  echo "slurmlab-nfs changed: nfs-server started"
elif [ -n "$new" ]; then
  exportfs -r || exit 1
fi
