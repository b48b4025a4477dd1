#!/bin/sh
# chrony's configuration (tasks/time.yml), and a restart of chrony only when the file changed.
# Needs install_if_changed. Arguments: the file, the unit, the text.
f="$1" unit="$2" conf="$3"
install_if_changed "$f" <<EOT
$conf
EOT
case $? in 0) ;; 1) exit 0 ;; *) exit 1 ;; esac
systemctl restart "$unit" && echo "slurmlab-chrony changed"
