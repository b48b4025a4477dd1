#!/bin/sh
# The shared folders answer (tasks/wait.yml): each one is read (which mounts it) and is an NFS mount.
# Arguments: the seconds one attempt may take, the mount points. Prints one line per folder.
t="$1"; shift; rc=0
for p in "$@"; do
  if ! err=$(timeout "$t" ls "$p/" 2>&1 >/dev/null); then echo "$p: ${err:-no answer within $t s}"; rc=1; continue; fi
  fs=$(findmnt -n -o FSTYPE --target "$p/." 2>/dev/null | tail -n 1)
  case "$fs" in nfs*) echo "$p: mounted ($fs)" ;; *) echo "$p: not an NFS mount (${fs:-none})"; rc=1 ;; esac
done
exit "$rc"
