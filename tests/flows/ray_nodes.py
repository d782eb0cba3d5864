"""Several Ray nodes on this machine, on loopback, in a process of their own (the tests' multi-node cluster).

    python tests/flows/ray_nodes.py NODES      # prints one JSON line, then obeys stdin lines

Ray's own multi-node test cluster (``ray.cluster_utils.Cluster``): a head and NODES-1 worker nodes, each its
own raylet, object store, one CPU, a ``node<i>`` resource and its own session folder, all on 127.0.0.1 in
the local-only mode and token authentication of the project's runtime (its environment is applied first),
the nodes' processes seeing a HOME that holds ``ray_bootstrap_config.yaml``. ``ray start`` cannot make such
nodes: a worker node refuses the local-only mode, and outside it Ray rewrites 127.0.0.1 to the machine's
address. The cluster lives in this process, not the test's, so the test process never imports Ray's node
machinery, and a node is lost by command as a machine would be.

The JSON line: ``{"address": "127.0.0.1:port", "nodes": [{"id", "temp_dir", "head"}, ...]}``. Commands:
``kill <id>`` SIGKILLs every process of that node (answers ``killed <id>``); ``stop`` ends the cluster
(answers ``stopped``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from vlmforge.flows.runtime.embedded import RAY_BOOTSTRAP, apply_quiet_env, ray_process_env, ray_token_path

apply_quiet_env()  # before Ray is imported: local-only mode, token authentication
ray_token_path()

import ray  # noqa: E402, F401 - the package first: ray._private.state alone left it half-initialised
import ray._private.state  # noqa: E402, F401 - Cluster reads it as an attribute of ray._private
from ray._private import utils as ray_utils  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402


def _node_args(i: int) -> dict[str, Any]:
    temp = tempfile.mkdtemp(prefix=f"vn{i}-", dir="/tmp")  # short: Ray's socket paths are limited
    return {"num_cpus": 1, "node_ip_address": "127.0.0.1", "temp_dir": temp, "resources": {f"node{i}": 1},
            "object_store_memory": 96 * 1024**2}  # fmt: skip


def main(nodes: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="vlmforge-raynodes-home-"))
    (home / "ray_bootstrap_config.yaml").write_text(RAY_BOOTSTRAP)
    os.environ.update(ray_process_env() | {"HOME": str(home)})  # inherited by every node's processes
    folders = [home]
    try:
        serve(nodes, folders)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        print("stopped", flush=True)


def serve(nodes: int, folders: list[Path]) -> None:
    """Start the nodes (their session folders appended to ``folders``), print them, obey stdin."""
    # Cluster writes its address to /tmp/ray/ray_current_cluster, where any other Ray on this machine would
    # find it: this cluster is the test's alone
    ray_utils.write_ray_address = lambda *a, **k: None
    args = [_node_args(i) for i in range(nodes)]
    folders += [Path(a["temp_dir"]) for a in args]
    cluster = Cluster(initialize_head=True, head_node_args=args[0] | {"include_dashboard": False})
    try:
        for a in args[1:]:
            cluster.add_node(**a)
        cluster.wait_for_nodes()
        by_id = {n.unique_id: n for n in [cluster.head_node, *cluster.worker_nodes]}
        described = [{"id": k, "temp_dir": n.get_temp_dir_path(), "head": n is cluster.head_node}
                     for k, n in by_id.items()]  # fmt: skip
        print(json.dumps({"address": cluster.address, "nodes": described}), flush=True)
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "kill":
                cluster.remove_node(by_id[arg], allow_graceful=False)
                print(f"killed {arg}", flush=True)
            elif cmd == "stop":
                break
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]))
