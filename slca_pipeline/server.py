"""The Prefect server of ``slca ui``: Prefect's own app, answering loopback host names only.

``prefect server start`` serves any ``Host`` header, so a web page whose name is made to
resolve to 127.0.0.1 (DNS rebinding) can drive the API from a browser; Prefect 3.7 has
no setting that checks the host. This runs the app ``prefect server start`` runs
(``create_app(final=True)``, API, UI and services in one process, under uvicorn) behind
Starlette's ``TrustedHostMiddleware``, as MLflow's server checks its host, and with
Prefect's CSRF protection on and CORS limited to the server's own origins, so a page of
another origin can neither read a CSRF token nor send a request that carries one.
Prefect's client fetches the token itself. An environment variable set by the user wins
over these defaults.

    python -m slca_pipeline.server --host 127.0.0.1 --port 4200
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
WILDCARD = ("", "0.0.0.0", "::")


def _url_name(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def allowed_hosts(host: str) -> list[str]:
    """The host names a request may name (any port): the loopback ones, and the bind
    address itself when it is one address (an IP literal cannot be rebound)."""
    names = list(LOOPBACK)
    if host not in WILDCARD and _url_name(host).lower() not in names:
        names.append(_url_name(host))
    return names


def server_environment(host: str, port: int) -> dict[str, str]:
    """Prefect's settings for this server: CSRF on, CORS for its own origins, and the
    UI's API address (Prefect's default ignores ``--port``)."""
    origins = ",".join(f"http://{name}:{port}" for name in allowed_hosts(host))
    url_host = "127.0.0.1" if host in WILDCARD else _url_name(host)
    return {
        "PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true",
        "PREFECT_SERVER_CORS_ALLOWED_ORIGINS": origins,
        "PREFECT_UI_API_URL": f"http://{url_host}:{port}/api",
    }


PREFECT_FACTORY = "prefect.server.api.server:create_app"
EPHEMERAL_FACTORY = "slca_pipeline.server:ephemeral_app"


def ephemeral_app() -> Any:
    """The app of a flow command's ephemeral server (Prefect's ``SubprocessASGIServer``:
    uvicorn on 127.0.0.1 and a free port, ``--factory``): Prefect's own, answering the
    loopback names only. That server listens on a real socket, so a page rebound to
    127.0.0.1 could reach it as it could ``slca ui``'s."""
    from prefect.server.api.server import create_app
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    return TrustedHostMiddleware(create_app(), allowed_hosts=list(LOOPBACK))


def host_checked(command: Sequence[str]) -> list[str]:
    """Prefect's ephemeral server command with :func:`ephemeral_app` as its factory."""
    return [EPHEMERAL_FACTORY if part == PREFECT_FACTORY else part for part in command]


def ephemeral_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The ephemeral server's environment with Prefect's CSRF protection on (Prefect's
    client fetches the token itself), unless ``env`` sets it."""
    return {"PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true", **env}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="Bind address.")
    parser.add_argument("--port", type=int, default=4200)
    args = parser.parse_args(argv)
    for key, value in server_environment(args.host, args.port).items():
        os.environ.setdefault(key, value)  # before Prefect reads its settings

    import uvicorn
    from prefect.server.api.server import create_app
    from prefect.settings import get_current_settings
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    api = get_current_settings().server.api
    uvicorn.run(
        TrustedHostMiddleware(create_app(final=True), allowed_hosts=allowed_hosts(args.host)),
        host=args.host,
        port=args.port,
        timeout_keep_alive=api.keepalive_timeout,
        ws_ping_interval=api.websocket_ping_interval,
        ws_ping_timeout=api.websocket_ping_timeout,
        log_level=get_current_settings().server.logging_level.lower(),
    )


if __name__ == "__main__":
    main()
