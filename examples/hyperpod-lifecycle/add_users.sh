#!/bin/bash
# add_users.sh ROLE: the users of shared_users.txt (name,uid,home a line) on this node, with the same
# uid everywhere; homes are made on the controller (it exports /home), elsewhere only named.
set -euo pipefail
role=$1
while IFS=, read -r name uid home; do
  [[ -z $name || $name == \#* ]] && continue
  if id "$name" >/dev/null 2>&1; then echo "user $name exists"; continue; fi
  if [[ $role == controller ]]; then
    useradd -m -d "$home" -u "$uid" -U -s /bin/bash "$name"
  else
    useradd -M -d "$home" -u "$uid" -U -s /bin/bash "$name"
  fi
  echo "added user $name (uid $uid)"
done < shared_users.txt
