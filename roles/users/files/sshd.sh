#!/bin/sh
# Password logins and the room's port on a login node (tasks/main.yml): the sshd drop-in written (yes)
# or removed (no), then sshd's configuration checked and ssh reloaded, only after a change. Needs
# install_if_changed. Arguments: the drop-in, yes|no, the room's port, then the students' names.
# Prints "slurmlab-sshd changed" when it changed something.
#
# The room (lab/room): the lab machine forwards a port of its own to this second port, for students at
# their laptops. Only the students log in there (never vagrant or root). Every connection through it
# comes from the lab's one address, so sshd's per-source penalties (OpenSSH 9.8+) would lock the whole
# room out after one student's typos, and the engine's own ssh with it: they are off, and the room
# slows repeated failures per real client address instead (lab/room/guard.py).
f="$1" want="$2" room="$3"; shift 3
if [ "$want" = yes ]; then
  penalties=""  # OpenSSH 9.8 and later (not `sshd -T`: with the Match below it wants a connection spec)
  case "$(ssh -V 2>&1)" in OpenSSH_[1-9][0-9].*|OpenSSH_9.[89]*) penalties="PerSourcePenalties no" ;; esac
  install_if_changed "$f" <<EOT
# Managed by slurmlab: the student accounts log in with the shared password.
PasswordAuthentication yes
Port 22
Port $room
$penalties
Match LocalPort $room
	AllowUsers $*
	PermitRootLogin no
	MaxAuthTries 3
EOT
  case $? in 0) ;; 1) exit 0 ;; *) exit 1 ;; esac
else
  [ -e "$f" ] || exit 0
  rm -f "$f"
fi
sshd -t || exit 1
systemctl reload ssh || exit 1
echo "slurmlab-sshd changed"
