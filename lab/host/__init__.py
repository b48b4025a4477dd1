"""The host side: the network namespace, libvirtd inside it, KVM detection, subprocess running."""
