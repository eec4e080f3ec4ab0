"""`smartsensor serve`: the HTTP API."""

from __future__ import annotations

import click

from smartsensor.cli.app import App, UserError


@click.command()
@click.option("--host", default=None, help="Address to listen on (default [api] host; 127.0.0.1 without a token).")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default [api] port).")
@click.pass_obj
def serve(app: App, host: str | None, port: int | None) -> None:
    """Serve the JSON API (/api/v1/health, /api/v1/status, /metrics) and the status page (/) until SIGTERM."""
    from smartsensor.adapters.lifecycle import StopRequest
    from smartsensor.api.auth import bind_host, configured_token
    from smartsensor.api.errors import JsonErrorH11Protocol
    from smartsensor.roots.serve import create_app, serve_until_stopped

    token = configured_token(app.cfg)
    listen, warning = bind_host(host or app.cfg.settings.api.host, token)
    if warning:
        click.echo(f"WARNING: {warning}", err=True)
    port = port or app.cfg.settings.api.port
    stop = StopRequest()
    api = create_app(app.cfg, app.engine(), token, stop)
    click.echo(
        f"serving http://{listen}:{port}/api/v1 and the status page at / "
        f"({'bearer token required' if token else 'no auth'})",
        err=True,
    )
    try:  # SIGTERM/SIGINT: a graceful shutdown, then exit 0, as every smartsensor process stops
        serve_until_stopped(api, listen, port, stop, log_level="warning", access_log=False, http=JsonErrorH11Protocol)
    except SystemExit as exc:  # uvicorn exits 1 when it cannot bind
        raise UserError(f"cannot serve on {listen}:{port} (in use, or not an address of this host)") from exc
