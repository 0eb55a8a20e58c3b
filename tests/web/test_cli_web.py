"""`persched web` as a user starts it: a real process, read-only without a token, stopped by SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

import pytest

from tests.support.helpers import TIMEOUT
from tests.support.served import REPO, Served
from tests.web.test_namespaces import two_namespaces

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def test_web_serves_until_sigterm(db: str, tmp_path: Path) -> None:
    served = Served("--db", db, "web", "--port", "0", cwd=tmp_path)
    try:
        url = _local(served.wait_for(r"persched web: (http://persched\.localhost:\d+/)").group(1))
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            page = response.read().decode()
        assert ">good</a>" in page
        assert "sign in" not in page  # no token: read-only, no sign-in link
    finally:
        code = served.stop()
    assert code == 0, served.lines


def _local(url: str) -> str:
    """`url` of the dashboard's own name (persched.localhost, which browsers resolve themselves) at 127.0.0.1."""
    return url.replace("persched.localhost", "127.0.0.1")


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


def test_web_honours_the_namespace_of_the_command_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'ns.db'}"
    two_namespaces(db)
    for args, env in ((("--namespace", "web"), {}), ((), {"PERSCHED_NAMESPACE": "web"})):
        served = Served("--db", db, *args, "web", "--port", "0", cwd=tmp_path, env_extra=env)
        try:
            url = _local(served.wait_for(r"persched web: (http://persched\.localhost:\d+/)").group(1))
            with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
                page = response.read().decode()
            assert ">web.a</a>" in page
            assert ">good</a>" not in page
            with urllib.request.urlopen(url + "job?id=web.a", timeout=TIMEOUT) as response:
                assert response.status == 200
            served.wait_for(r"namespace 'web'")
        finally:
            code = served.stop()
        assert code == 0, served.lines


def test_web_takes_the_token_from_a_file_and_warns_of_the_flag(db: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file-0123456789\n")
    token_file.chmod(0o644)
    served = Served("--db", db, "web", "--port", "0", "--token-file", str(token_file), cwd=tmp_path)
    try:
        own = served.wait_for(r"persched web: (http://persched\.localhost:\d+/)").group(1)
        served.wait_for(r"WARNING .*--token-file .* can be read by other users")
        request = urllib.request.Request(
            _local(own) + "login",
            data=b"token=from-a-file-0123456789",
            method="POST",
            headers={"Host": urllib.parse.urlsplit(own).netloc},  # its own name: signing in under 127.0.0.1 is refused
        )
        opener = urllib.request.build_opener(_NoRedirect())
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(request, timeout=TIMEOUT)
        redirect.value.close()
        assert redirect.value.code == 303  # signed in with the file's token
        assert "from-a-file" not in "\n".join(served.lines)
    finally:
        assert served.stop() == 0
    flagged = Served("--db", db, "web", "--port", "0", "--token", "on-the-command-line", "--allowed-host", "*",
                     cwd=tmp_path)  # fmt: skip
    try:
        flagged.wait_for(r"persched web: ")
        flagged.wait_for(r"WARNING .*--token is visible to every local user in the process list")
        flagged.wait_for(r"WARNING .*--allowed-host '\*' answers every Host")
        assert "on-the-command-line" not in "\n".join(flagged.lines)
    finally:
        assert flagged.stop() == 0


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_token_file_that_is_not_a_regular_file_is_refused_at_once(db: str, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "token"
    if kind == "fifo":
        os.mkfifo(path)  # opening it to read would wait for a writer: the start-up hung, silently
    elif kind == "directory":
        path.mkdir()
    else:
        path = tmp_path / "zero"
        path.symlink_to("/dev/zero")
    argv = [sys.executable, "-m", "persched", "--db", db, "web", "--port", "0", "--token-file", str(path)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [f"persched: error: --token-file: {path} is not a regular file"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--namespace", ""), "bad --namespace"),
        (("--namespace", "a\x01b"), "bad --namespace"),
        (("--namespace", "n" * 101), "bad --namespace"),
        (("web", "--token-file", "/nonexistent/token"), "--token-file: cannot read /nonexistent/token"),
        (("web", "--allowed-host", "a b"), "--allowed-host: not a host name"),
        (("web", "--read-timeout", "0"), "--read-timeout"),
        (("web", "--read-timeout", "nan"), "--read-timeout"),
        (("web", "--token", "x", "--token-file", "y"), "not allowed with argument"),
    ],
)
def test_bad_web_options_are_one_line(db: str, args: tuple[str, ...], message: str) -> None:
    argv = [sys.executable, "-m", "persched", "--db", db, *args]
    if args[0] != "web":
        argv += ["web", "--port", "0"]
    else:
        argv += ["--port", "0"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode in (1, 2), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]
