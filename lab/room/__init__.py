"""The room's way in (issue 44): each cluster's login node ssh on a port of the lab machine's own address,
for the students at their laptops: `ssh -p 2201 user07@LAB-MACHINE`, `scp -P`, `rsync -e 'ssh -p 2201'`.

- ports.py: the cluster's port (kept for its life) and whether a process has it open;
- guard.py: what sshd said of a connection, and the slowing of repeated failures per client address;
- door.py: the listener (a forward of lab/providers/forward.py that knows its clients) and the keeper
  that opens, moves and closes the rooms of `slurmlab serve` and of `slurmlab room NAME`.

The login node's side is roles/users: a second sshd port (NODE_PORT) that lets in the cluster's students
only (never vagrant or root), with the shared password or their own keys.
"""
