"""Alembic migrations, shipped in the wheel as ``persched._migrations`` (pyproject.toml, ``package-dir``)."""
