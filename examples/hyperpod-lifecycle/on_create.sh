#!/bin/bash
# OnCreate of a HyperPod-style lifecycle bundle (the lab's own, written to the contract AWS's
# base-config follows; docs/hyperpod-nodes.md). HyperPod runs it as root from the uploaded folder.
set -euo pipefail

RESOURCE_CONFIG=${SAGEMAKER_RESOURCE_CONFIG_PATH:-/opt/ml/config/resource_config.json}
PARAMETERS=provisioning_parameters.json

echo "[on_create] $(date -u +%FT%TZ) on $(hostname)"
if [[ ! -f $RESOURCE_CONFIG ]]; then
  # AWS's base-config exits 0 here ("vanilla cluster"); a test bundle should say it loudly instead.
  echo "[on_create] $RESOURCE_CONFIG is missing: this is not a HyperPod-shaped node" >&2
  exit 1
fi
exec python3 lifecycle.py --resource-config "$RESOURCE_CONFIG" --parameters "$PARAMETERS"
