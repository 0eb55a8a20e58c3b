"""examples/flask_app.py's app, with persched's INFO lines on stderr (tests read where each process ran jobs)."""

from __future__ import annotations

import logging

from examples.flask_app import create_app

logging.basicConfig(level=logging.INFO, format="%(levelname)s [%(process)d] %(name)s: %(message)s")
app = create_app()
