"""Workflows the CLI runs that span several parts of the lab (host, box, spec, engine, nodes):

    create     create-cluster's path: spec and --users, box, host, capacity, the record
    up         the whole path: host, box, cluster, wait, a first job, how to get in
    nodes      the configure context of a cluster's running nodes (verify, users)
    accounts   users add / remove: users.json, then users.yml over the running nodes

Each returns data; the CLI (lab/cli.py, lab/cmd/) parses options and renders.
"""
