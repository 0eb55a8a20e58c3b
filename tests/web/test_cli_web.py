"""`persched web` as a user starts it: a real process, read-only without a token, stopped by SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from typing import TYPE_CHECKING

import pytest

from tests.support.helpers import TIMEOUT
from tests.support.served import REPO, Served

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def test_web_serves_until_sigterm(db: str, tmp_path: Path) -> None:
    served = Served("--db", db, "web", "--port", "0", cwd=tmp_path)
    try:
        url = served.wait_for(r"persched web: (http://127\.0\.0\.1:\d+/)").group(1)
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            page = response.read().decode()
        assert ">good</a>" in page
        assert "sign in" not in page  # no token: read-only, no sign-in link
    finally:
        code = served.stop()
    assert code == 0, served.lines


def test_web_refuses_a_short_token_in_one_line(db: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "persched", "--db", db, "web", "--port", "0"],
        cwd=REPO,
        env={**os.environ, "PERSCHED_WEB_TOKEN": "short"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "persched: error: --token: use at least 12 characters (e.g. `openssl rand -hex 16`)"
    ]
