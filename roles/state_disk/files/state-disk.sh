#!/bin/sh
# The controller's state on its state disk (tasks/main.yml, docs/adr/0007): format the disk once
# (ext4), mount it, bind-mount a folder of it over each folder given (copying what the folder held
# the first time), and keep both in fstab. Arguments: the device, the mount point, fstab, the folders.
# Prints "slurmlab-state changed: ..." per change, "slurmlab-state failed: ..." on a failure,
# "slurmlab-state: no state disk" without one.
dev="$1" top="$2" fstab="$3"; shift 3
say() { echo "slurmlab-state changed: $*"; }
die() { echo "slurmlab-state failed: $*" >&2; exit 1; }
if [ ! -b "$dev" ]; then
  echo "slurmlab-state: no state disk ($dev): the state stays on the system disk"; exit 0
fi
fs=$(blkid -o value -s TYPE "$dev" 2>/dev/null)
if [ -z "$fs" ]; then
  # lazy init: the inode tables and the journal are zeroed later by the kernel, not here (the
  # journal alone is 64 MiB of writes on the controller's critical path under emulation)
  mkfs.ext4 -q -E lazy_itable_init=1,lazy_journal_init=1 -L slurmlab-state "$dev" || die "mkfs.ext4 $dev failed"
  say "$dev formatted (ext4)"
elif [ "$fs" != ext4 ]; then
  die "$dev holds a $fs file system, not the ext4 slurmlab makes: not touched"
fi
keep=""
for d in "$@"; do  # a folder with a file system mounted below it (rpc_pipefs?) stays where it is
  if ! mountpoint -q "$d" && findmnt -rn -o TARGET | grep -q "^$d/"; then
    echo "slurmlab-state: $d stays on the system disk: a file system is mounted below it"; continue
  fi
  keep="$keep $d"
done
# shellcheck disable=SC2086 # $keep: the folders kept (no space in them: validate.yml)
set -- $keep
{ uuid=$(blkid -o value -s UUID "$dev") && [ -n "$uuid" ]; } || die "no UUID on $dev"
add() { grep -qxF "$1" "$fstab" || { echo "$1" >> "$fstab" && say "$fstab: $1"; } || die "cannot write $fstab"; }
add "UUID=$uuid $top ext4 defaults 0 2"
for d in "$@"; do
  add "$top/$(echo "${d#/}" | tr / _) $d none bind,x-systemd.requires-mounts-for=$top 0 0"
done
# no `systemctl daemon-reload` for the new lines (3 s on an idle emulated node, 10 s on the controller's
# critical path while the other nodes configure): mount(8) reads fstab itself, systemd follows the mounts
# as they happen (mountinfo), and its fstab generator reads the lines at the next boot (issue 42)
mkdir -p "$top" || die "cannot create $top"
if ! mountpoint -q "$top"; then mount "$top" || die "cannot mount $dev on $top"; say "$top mounted"; fi
for d in "$@"; do
  s="$top/$(echo "${d#/}" | tr / _)"
  if mountpoint -q "$d"; then continue; fi
  mkdir -p "$d" || die "cannot create $d"
  if [ ! -d "$s" ]; then  # the first time: what the folder holds goes to the disk (owner, mode kept)
    { rm -rf "$s.new" && cp -a "$d" "$s.new" && mv "$s.new" "$s"; } || die "cannot copy $d to $s"
    say "$d copied to the state disk"
  fi
  mount "$d" || die "cannot bind-mount $s on $d"
  say "$d mounted from the state disk"
done
