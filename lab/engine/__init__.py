"""The engine: desired state (target counts) against observed state (libvirt, Slurm), reconciled."""
