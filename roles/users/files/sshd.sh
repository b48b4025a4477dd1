#!/bin/sh
# Password logins on a login node (tasks/main.yml): the sshd drop-in written (yes) or removed (no),
# then sshd's configuration checked and ssh reloaded, only after a change. Needs install_if_changed.
# Arguments: the drop-in, yes|no. Prints "slurmlab-sshd changed" when it changed something.
f="$1" want="$2"
if [ "$want" = yes ]; then
  install_if_changed "$f" <<'EOT'
# Managed by slurmlab: the student accounts log in with the shared password.
PasswordAuthentication yes
EOT
  case $? in 0) ;; 1) exit 0 ;; *) exit 1 ;; esac
else
  [ -e "$f" ] || exit 0
  rm -f "$f"
fi
sshd -t || exit 1
systemctl reload ssh || exit 1
echo "slurmlab-sshd changed"
