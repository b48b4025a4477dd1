"""Providers create, observe and remove the VMs of a cluster (kind's provider shape)."""
