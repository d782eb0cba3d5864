"""``vlmforge schedule resume|pause DEPLOYMENT``: turn every schedule of one deployment on or off.

``prefect.yaml``'s schedules ship paused (its paths are examples). Prefect's own ``prefect deployment
schedule resume`` takes a deployment *and* a schedule id, or ``--all`` for every deployment of the server
(naming a deployment with ``--all`` is refused); this command takes the deployment alone, as the docs say
to. It talks to the Prefect server of ``PREFECT_API_URL`` (where the deployments were registered).

Registered on the main app by ``flows/cli/__init__.py``.
"""

from __future__ import annotations

from typing import Annotated

import typer

schedule_app = typer.Typer(
    name="schedule",
    help="Resume or pause the schedules of a deployment (prefect.yaml's ship paused).",
    no_args_is_help=True,
)

Deployment = Annotated[
    str, typer.Argument(help="FLOW/DEPLOYMENT, e.g. vlmforge-refresh/nemotron-v3-nightly-refresh")
]


@schedule_app.command("resume")
def resume(deployment: Deployment) -> None:
    """Turn on every schedule of DEPLOYMENT."""
    _set_active(deployment, active=True)


@schedule_app.command("pause")
def pause(deployment: Deployment) -> None:
    """Turn off every schedule of DEPLOYMENT."""
    _set_active(deployment, active=False)


def _set_active(name: str, *, active: bool) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    from ...tasks.errors import UsageError
    from ..runtime.embedded import configured_api_url

    if not configured_api_url():
        raise UsageError(
            "no Prefect server to change: PREFECT_API_URL is not set",
            "point it at the server the deployments were registered on (`vlmforge server`: "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api)",
        )
    if "/" not in name:
        raise UsageError(f"{name!r} is not FLOW/DEPLOYMENT", "`prefect deployment ls` lists them")
    verb = "resumed" if active else "paused"
    with get_client(sync_client=True) as client:
        try:
            found = client.read_deployment_by_name(name)
        except ObjectNotFound:
            raise UsageError(
                f"no deployment {name!r} on {configured_api_url()}", "see `prefect deployment ls`"
            ) from None
        if not found.schedules:
            raise UsageError(f"{name} has no schedule", "its schedules are in prefect.yaml")
        for s in found.schedules:
            if s.active != active:
                client.update_deployment_schedule(found.id, s.id, active=active)
            typer.echo(f"{verb}: {name} schedule {s.schedule} ({s.id})")


def register(app: typer.Typer) -> None:
    app.add_typer(schedule_app, name="schedule")
