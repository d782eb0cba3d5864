"""A deployment run's task runner follows the run's own ``cfg.execution``.

prefect.yaml's deployments run ``run_release`` as decorated, with a runner that names no cluster, and Prefect
enters that runner before the run's parameters are in its context. The runner reads them from the flow run
(the id a worker gives the run's process), so ``cfg.execution.ray_address`` and ``num_cpus`` of a
deployment run are the ones it gets. Here against Prefect's real API (its test harness), without starting
Ray: what the runner would attach to is its address and ``ray.init`` arguments. The whole path on a cluster:
``tests/flows/test_multinode.py``.
"""

from __future__ import annotations

import pytest

from vlmforge.flows.runtime.embedded import LoopbackRayTaskRunner
from vlmforge.flows.runtime.ray_attach import attach_kwargs, execution_of
from vlmforge.schemas.config import RunConfig

pytestmark = pytest.mark.slow  # a service (Ray, a Prefect server or an S3 server) of its own


def _flow_run_with(parameters: dict[str, object]) -> str:
    """A flow run of a stand-in flow holding ``parameters``, created through the API; its id."""
    from prefect import flow
    from prefect.client.orchestration import get_client

    @flow(name="vlmforge-runner-params")
    def stand_in(cfg: dict[str, object]) -> None:
        """Never run: the flow run only carries the parameters."""

    with get_client(sync_client=True) as client:
        return str(client.create_flow_run(stand_in, parameters=parameters).id)


def test_a_deployment_runs_runner_takes_the_cluster_and_cpus_of_its_parameters(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = {"out": "s3://b/out", "execution": {"ray_address": "127.0.0.1:6379", "num_cpus": 3}}
    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", _flow_run_with({"cfg": cfg}))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    runner = LoopbackRayTaskRunner().duplicate()  # as Prefect's engine enters the flow's runner
    runner._take_flow_run_execution()
    assert runner.address == "127.0.0.1:6379"
    assert runner.num_cpus == 3
    assert runner.init_kwargs["_node_ip_address"] == "127.0.0.1"  # a loopback cluster's driver says so
    assert not runner.starts_local_ray()


def test_a_run_without_a_cluster_in_its_parameters_keeps_a_local_ray(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", _flow_run_with({"cfg": {"out": "/tmp/out"}}))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    runner = LoopbackRayTaskRunner()
    runner._take_flow_run_execution()
    assert runner.address is None and runner.num_cpus is None


def test_an_address_given_to_the_runner_wins_over_the_parameters(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = {"execution": {"ray_address": "127.0.0.1:6379"}}
    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", _flow_run_with({"cfg": cfg}))
    runner = LoopbackRayTaskRunner(address="10.0.0.7:6379")  # what `vlmforge run --ray-address` makes
    runner._take_flow_run_execution()
    assert runner.address == "10.0.0.7:6379"


def test_vlmforge_runs_runner_keeps_its_own_options_inside_another_flow_run(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `vlmforge run` started from some flow run's process (a shell step of a deployment) inherits its
    # PREFECT__FLOW_RUN_ID: its runner is made from its own options and must not take that run's cfg
    from vlmforge.flows.ops import runner_for

    cfg = {"execution": {"ray_address": "127.0.0.1:6379", "num_cpus": 3}}
    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", _flow_run_with({"cfg": cfg}))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    runner = runner_for(RunConfig.of(release="r", out="o", num_cpus=1)).duplicate()
    runner._take_flow_run_execution()
    assert runner.address is None and runner.num_cpus == 1


def test_execution_options_of_a_cfg_parameter() -> None:
    options = RunConfig.of(release="r", out="o", ray_address="h:6379", num_cpus=4).execution
    assert execution_of(RunConfig.of(release="r", out="o", ray_address="h:6379", num_cpus=4)) == options
    assert execution_of({"execution": {"ray_address": "h:6379", "num_cpus": 4}}) == options
    assert execution_of({"out": "o"}) == RunConfig.of(release="r", out="o").execution
    assert execution_of({"execution": {"num_cpus": 0}}) is None  # a bad one: the flow itself reports it
    assert execution_of(None) is None and execution_of("cfg") is None


def test_a_driver_on_a_loopback_cluster_names_its_loopback_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert attach_kwargs("127.0.0.1:6379") == {"_node_ip_address": "127.0.0.1"}
    assert attach_kwargs("ray://localhost:10001") == {"_node_ip_address": "127.0.0.1"}
    assert attach_kwargs("10.0.0.7:6379") == {}
    assert attach_kwargs(None) == {}
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert attach_kwargs(None) == {"_node_ip_address": "127.0.0.1"}
