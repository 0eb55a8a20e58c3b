"""Child process of the Django admin's browser test: the admin project of django_admin_check, served over HTTP.

    python -m tests.support.django_admin_serve DB_PATH

Makes the project (`configure`, `populate`: two jobs in namespace "shop",
the users "viewer", "operator" and "root", password "pw"), then serves it
with its static files (as ``runserver`` does) by Django's threaded WSGI
server on 127.0.0.1, on a port the system
picks, which it prints as its first line. It serves until SIGTERM.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, NoReturn

from tests.support.django_admin_check import configure, populate


def _stop(signum: int, frame: Any) -> NoReturn:  # noqa: ANN401 - a signal frame
    raise SystemExit(0)


def main(db_path: str) -> None:
    configure(db_path)
    populate(db_path)
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    server = ThreadedWSGIServer(("127.0.0.1", 0), WSGIRequestHandler)
    server.set_app(StaticFilesHandler(WSGIHandler()))  # the admin's CSS and scripts too
    signal.signal(signal.SIGTERM, _stop)
    print(server.server_address[1], flush=True)  # noqa: T201 - the test reads the port from this line
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1])
