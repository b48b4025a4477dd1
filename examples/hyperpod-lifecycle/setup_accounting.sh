#!/bin/bash
# setup_accounting.sh: Slurm accounting on the controller: MariaDB, slurmdbd, and the accounting
# settings in /opt/slurm/etc/accounting.conf (slurm.conf includes it, as on HyperPod).
set -euo pipefail
db=slurm_acct_db
systemctl enable --now mariadb
mariadb -e "CREATE DATABASE IF NOT EXISTS \`$db\`;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;
  GRANT ALL ON \`$db\`.* TO 'slurm'@'localhost';"
DBD_HOST=$(hostname) STORAGE_LOC=$db envsubst < slurmdbd.conf.template > /opt/slurm/etc/slurmdbd.conf
chown slurm:slurm /opt/slurm/etc/slurmdbd.conf
chmod 0600 /opt/slurm/etc/slurmdbd.conf
systemctl enable --now slurmdbd
cat > /opt/slurm/etc/accounting.conf <<EOT
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$(hostname)
JobAcctGatherFrequency=30
EOT
# slurmdbd answers before slurmctld starts (its first start registers the cluster)
for _ in $(seq 60); do
  if /opt/slurm/bin/sacctmgr --noheader --parsable2 show cluster >/dev/null 2>&1; then break; fi
  sleep 2
done
echo "accounting: slurmdbd on $(hostname), database $db"
