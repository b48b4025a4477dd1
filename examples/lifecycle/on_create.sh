#!/bin/bash
# OnCreate lifecycle script: runs once as root on every new node, like HyperPod's OnCreate.
# The lab copies this folder (LifeCycleConfig.SourceS3Uri) to the node and runs the script from it.
# A non-zero exit marks the node's launch as failed.
set -euo pipefail

marker=/etc/slurmlab-lifecycle-ran
log() { echo "[on_create] $*"; logger -t slurmlab-lifecycle -- "$*" 2>/dev/null || true; }

log "start on $(hostname) in $(pwd)"
{
  echo "host=$(hostname)"
  echo "time=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "script=$0"
} > "$marker"
chmod 0644 "$marker"
log "done: wrote $marker"
