"""`gpuplan web`: serve the JSON API and the page on this machine."""

from __future__ import annotations

import click


@click.command("web")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.option(
    "--hub",
    is_flag=True,
    help="Let a model be a Hugging Face repo id: read from this machine's Hugging Face cache,"
    " else the Hub (config and headers only). Off: the server reads no file for a request.",
)
def web_command(host: str, port: int, open_browser: bool, hub: bool) -> None:
    """Start the local web app: live simulation, guided lesson, playground and plots."""
    import os
    import threading
    import webbrowser

    import uvicorn

    from gpuplan.web.app import create_app
    from gpuplan.web.guard import LOOPBACK_HOSTS

    loopback = host in ("127.0.0.1", "localhost", "::1")
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/"
    if not loopback:
        click.echo(f"gpuplan: listening on {host}: anyone who can reach it can use it", err=True)
    click.echo(f"gpuplan web: {url} (Ctrl+C to stop)")
    if open_browser:
        threading.Timer(1.0, lambda: webbrowser.open(url)).start()
    if hub:  # read by the worker processes (web/compute.py hub_allowed), which inherit it
        from gpuplan.web.compute import HUB_ENV

        os.environ[HUB_ENV] = "1"
    # bound to loopback, it answers only to loopback names (no DNS rebinding)
    app = create_app(hosts=LOOPBACK_HOSTS if loopback else None)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=1
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            # Ctrl+C means now: stop the computations (their requests answer 503 at once)
            # rather than wait for them
            threading.Thread(target=app.state.engine.close, daemon=True).start()
            super().handle_exit(sig, frame)  # type: ignore[arg-type]

    Server(config).run()
