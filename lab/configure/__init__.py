"""Configuration of the nodes: ansible-runner runs playbooks/ with roles/ over the cluster's inventory."""
