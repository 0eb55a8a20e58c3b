"""Alembic migrations, shipped in the wheel as ``persched._migrations`` (STYLE §1)."""
