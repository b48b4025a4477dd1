#!/bin/sh
# MariaDB and slurmdbd (tasks/main.yml): slurmdbd.conf if it differs, MariaDB running with the
# database and its unix_socket user, slurmdbd running (restarted after a change). Needs
# install_if_changed. Arguments: slurmdbd.conf, its text in base64, the database.
# Prints "slurmlab-accounting changed: ..." per change, "slurmlab-accounting failed: ..." on a failure.
f="$1" text="$2" db="$3"
say() { echo "slurmlab-accounting changed: $*"; }
die() { echo "slurmlab-accounting failed: $*" >&2; exit 1; }
journal() { journalctl -u "$1" -n 5 --no-pager -o cat | tr '\n' ' '; }
echo "$text" | base64 -d | install_if_changed "$f" 0600 slurm:slurm
case $? in 0) conf=1; say "$f" ;; 1) conf="" ;; *) die "cannot write $f" ;; esac
if [ "$(systemctl is-active mariadb)" != active ] || [ "$(systemctl is-enabled mariadb)" != enabled ]; then
  # no SysV sync and no daemon-reload: `systemctl enable` costs 15 s under emulation with them
  SYSTEMCTL_SKIP_SYSV=1 systemctl enable mariadb --no-reload || die "cannot enable mariadb"
  systemctl start mariadb || die "mariadb did not start: $(journal mariadb)"
  say "mariadb started"
fi
m=/var/lib/slurmlab/accounting-db.done
if [ ! -e "$m" ]; then
  sql="CREATE DATABASE IF NOT EXISTS \`$db\`; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;"
  mariadb -e "$sql GRANT ALL ON \`$db\`.* TO 'slurm'@'localhost';" \
    || die "cannot create the database $db"
  mkdir -p "${m%/*}" && echo "$db" > "$m"; say "database $db"
fi
if [ "$(systemctl is-active slurmdbd)" != active ] || [ "$(systemctl is-enabled slurmdbd)" != enabled ]; then
  SYSTEMCTL_SKIP_SYSV=1 systemctl enable slurmdbd --no-reload || die "cannot enable slurmdbd"
  systemctl start slurmdbd || die "slurmdbd did not start: $(journal slurmdbd)"
  say "slurmdbd started"
elif [ -n "$conf" ]; then
  systemctl restart slurmdbd || die "slurmdbd did not restart"
  say "slurmdbd restarted"
fi
