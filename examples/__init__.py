"""Runnable examples of persched (not part of the installed package)."""
