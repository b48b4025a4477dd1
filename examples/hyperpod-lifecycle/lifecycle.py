"""Find this node's role in resource_config.json (by its own address) and provisioning_parameters.json,
then run the steps of that role, each a script of this folder. Prints "Execute script: ./X ARGS"
before each step, as AWS's base-config does, so that a failure can be traced to its step."""

import argparse
import json
import socket
import subprocess
import sys


def own_addresses() -> set[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout.split()
    return set(out) | {socket.gethostbyname(socket.gethostname())}


def find_self(config: dict) -> tuple[str, dict]:
    mine = own_addresses()
    for group in config["InstanceGroups"]:
        for instance in group["Instances"]:
            if instance["CustomerIpAddress"] in mine:
                return group["Name"], instance
    sys.exit(f"none of this node's addresses ({', '.join(sorted(mine))}) is in resource_config.json")


def controller_address(config: dict, params: dict) -> str:
    for group in config["InstanceGroups"]:
        if group["Name"] == params["controller_group"]:
            return group["Instances"][0]["CustomerIpAddress"]
    sys.exit(f"controller_group '{params['controller_group']}' is not in resource_config.json")


def run(script: str, *args: str) -> None:
    print(f"Execute script: ./{script} {' '.join(args)}".rstrip(), flush=True)
    subprocess.run(["/bin/bash", f"./{script}", *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--resource-config", required=True)
    ap.add_argument("--parameters", required=True)
    a = ap.parse_args()
    with open(a.resource_config) as f:
        config = json.load(f)
    with open(a.parameters) as f:
        params = json.load(f)
    if params.get("workload_manager") != "slurm":
        sys.exit(f"workload_manager is {params.get('workload_manager')!r}; this bundle sets up Slurm")
    group, me = find_self(config)
    role = ("controller" if group == params["controller_group"]
            else "login" if group == params.get("login_group") else "compute")
    print(f"[lifecycle] {me['InstanceName']} ({me['CustomerIpAddress']}) is a {role} node of group {group}",
          flush=True)
    run("add_users.sh", role)
    if role == "controller":
        run("setup_accounting.sh")
        run("start_slurm.sh", "controller")
    else:
        run("start_slurm.sh", role, controller_address(config, params))
    print("[lifecycle] done", flush=True)


if __name__ == "__main__":
    main()
