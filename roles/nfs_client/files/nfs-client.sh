#!/bin/sh
# The shared folders as systemd mount and automount units (tasks/main.yml), each written only if it
# differs, the automounts enabled (remote-fs.target) and started. Needs install_if_changed.
# Arguments: the NFS server, the mount options, the seconds a mount may take, the unit folder, the
# fstab file, then the mount points. Prints "slurmlab-nfs changed: ..." for what it changed.
# Units, not fstab lines: a new unit loads when it is started, while fstab lines need
# `systemctl daemon-reload` (its generators), 3 s on an idle emulated node and 10-15 s while the
# cluster's other nodes configure (issue 42). Reloaded only for a unit that was loaded and changed,
# and once for the fstab block the role wrote before.
all="$*" marker="${NFS_CLIENT_MARKER:-/var/lib/slurmlab/nfs-client.done}"  # (tests: elsewhere)
server="$1" options="$2" timeout="$3" dir="$4" fstab="$5"; shift 5
b='/^# BEGIN slurmlab shared folders$/' e='/^# END slurmlab shared folders$/'
reload="" units=""
if grep -q '^# BEGIN slurmlab shared folders$' "$fstab"; then  # written by this role before
  sed "$b,${e}d" "$fstab" | install_if_changed "$fstab" 0644
  case $? in 0 | 1) ;; *) exit 1 ;; esac
  echo "slurmlab-nfs changed: $fstab (the shared folders are units now)"
  reload=1
fi
mkdir -p "$dir/remote-fs.target.wants" || exit 1
for p in "$@"; do
  u=$(systemd-escape --path "$p") || exit 1
  mkdir -p "$p" || exit 1
  for kind in mount automount; do
    f="$dir/$u.$kind"
    known=""
    if [ -e "$f" ]; then known=1; fi
    if [ "$kind" = mount ]; then
      text="[Unit]
Description=slurmlab shared folder $p from $server

[Mount]
What=$server:$p
Where=$p
Type=nfs
Options=$options
TimeoutSec=$timeout"
    else
      text="[Unit]
Description=slurmlab shared folder $p, mounted on first use

[Automount]
Where=$p

[Install]
WantedBy=remote-fs.target"
    fi
    printf '%s\n' "$text" | install_if_changed "$f" 0644
    case $? in
      0) echo "slurmlab-nfs changed: $f"; [ -z "$known" ] || reload=1 ;;
      1) ;;
      *) exit 1 ;;
    esac
  done
  # enabled by its link (what `systemctl enable` makes, without its own reload of the units)
  [ -L "$dir/remote-fs.target.wants/$u.automount" ] || ln -sf "$dir/$u.automount" "$dir/remote-fs.target.wants/" || exit 1
  units="$units $u.automount"
done
if [ -n "$reload" ]; then systemctl daemon-reload || exit 1; fi
for u in $units; do
  if [ "$(systemctl is-active "$u")" != active ]; then
    systemctl start "$u" || exit 1
    echo "slurmlab-nfs changed: $u started"
  fi
done
# what the probe (role common) reads: these arguments and the automounts; the role skips this script
# while both are as they are now (a role template's fork, a second run)
mkdir -p "${marker%/*}" && printf '%s\n%s\n' "$all" "${units# }" > "$marker" || exit 1
