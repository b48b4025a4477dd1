#!/bin/sh
# MariaDB and slurmdbd (tasks/main.yml): slurmdbd.conf if it differs, MariaDB running with the
# database and its unix_socket user, slurmdbd running (restarted after a change). Needs
# install_if_changed. Arguments: slurmdbd.conf, its text in base64, the database.
# Prints "slurmlab-accounting changed: ..." per change, "slurmlab-accounting failed: ..." on a failure.
f="$1" text="$2" db="$3"
say() { echo "slurmlab-accounting changed: $*"; }
die() { echo "slurmlab-accounting failed: $*" >&2; exit 1; }
journal() { journalctl -u "$1" -n 5 --no-pager -o cat | tr '\n' ' '; }
# enable and start a unit that is not both (returns 1 when it was both already)
# no SysV sync and no daemon-reload: `systemctl enable` costs 15 s under emulation with them
started() {
  if [ "$(systemctl is-active "$1")" = active ] && [ "$(systemctl is-enabled "$1")" = enabled ]; then return 1; fi
  SYSTEMCTL_SKIP_SYSV=1 systemctl enable "$1" --no-reload || die "cannot enable $1"
  systemctl start "$1" || die "$1 did not start: $(journal "$1")"
  say "$1 started"
}
echo "$text" | base64 -d | install_if_changed "$f" 0600 slurm:slurm
case $? in 0) conf=1; say "$f" ;; 1) conf="" ;; *) die "cannot write $f" ;; esac
started mariadb
m=/var/lib/slurmlab/accounting-db.done
if [ ! -e "$m" ]; then
  sql="CREATE DATABASE IF NOT EXISTS \`$db\`; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;"
  mariadb -e "$sql GRANT ALL ON \`$db\`.* TO 'slurm'@'localhost';" \
    || die "cannot create the database $db"
  mkdir -p "${m%/*}" && echo "$db" > "$m"; say "database $db"
fi
if ! started slurmdbd && [ -n "$conf" ]; then
  systemctl restart slurmdbd || die "slurmdbd did not restart"
  say "slurmdbd restarted"
fi
