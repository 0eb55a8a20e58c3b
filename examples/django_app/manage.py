"""Django's command-line utility for the example: ``python -m examples.django_app.manage COMMAND``."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run a management command (``persched``, ``runserver``, ``check``, ...)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
