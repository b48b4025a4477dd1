"""The request side: what the CLI and the API call (lab/control/clusters.py gathers it). A request
is checked whole, then written into the store in one transaction as desired state and an operation;
views read the store in HyperPod's shapes. The engine (lab/engine) carries requests out; nothing in
lab/engine imports this package (lab.importgraph checks the package graph)."""
