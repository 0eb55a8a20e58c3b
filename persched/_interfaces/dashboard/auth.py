"""Who may act on the dashboard: the access token's sessions, or the application's hook; and CSRF tokens.

`Access` holds one dashboard's way and says who acts in a request. `Sessions` and `SignInLimiter`
each guard their state with a lock of their own, never held with another; `Devices` keeps no state.
The reasoning: docs/explanation/interfaces.md, "Who may act" and "Signing in".
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import secrets
import stat
import threading
from typing import TYPE_CHECKING, Final

from ...errors import PerschedError
from .request import Actor

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    from _typeshed.wsgi import WSGIEnvironment

    from .request import Request

    #: The hook of an application that mounts the dashboard: who acts (a name for the log), or None: may only read.
    Authorize: TypeAlias = Callable[[WSGIEnvironment], str | None]

__all__ = [
    "Access",
    "Authorize",
    "Devices",
    "Sessions",
    "SignInLimiter",
    "csrf_token",
    "read_token_file",
    "same_secret",
]

SESSION_SECONDS: Final = 8 * 3600.0  # a session's lifetime from its sign-in
MAX_SESSIONS: Final = 1_000  # sessions kept at once; a new one beyond ends the oldest
SIGN_IN_WINDOW: Final = 60.0  # seconds over which failed sign-ins are counted
SIGN_IN_FAILURES_PER_CLIENT: Final = 5  # failures per client address per window
SIGN_IN_FAILURES_TOTAL: Final = 30  # failures from all addresses per window (not of trusted browsers)
DEVICE_SECONDS: Final = 30 * 24 * 3600.0  # a device cookie's lifetime (Max-Age)
MAX_TOKEN_FILE_BYTES: Final = 4_096


def _digest(value: str | bytes) -> bytes:
    return hashlib.sha256(value.encode() if isinstance(value, str) else value).digest()


def same_secret(given: str, token: bytes) -> bool:
    """Whether `given` is the token, in time independent of where they differ and of their lengths."""
    return hmac.compare_digest(_digest(given), _digest(token))


def csrf_token(secret: bytes, actor_key: str) -> str:
    """Return the CSRF token of forms for `actor_key` (a session, or a user the hook named)."""
    return hmac.new(secret, f"csrf:{actor_key}".encode(), hashlib.sha256).hexdigest()


class Sessions:
    """The signed-in sessions of one dashboard process, each bound to the Host it signed in under.

    Args:
        lifetime: Seconds a session lasts from its sign-in.
        monotonic: The clock (seconds); tests pass their own.
        limit: Sessions kept at once.
    """

    def __init__(self, lifetime: float, monotonic: Callable[[], float], limit: int = MAX_SESSIONS) -> None:
        self._lifetime = lifetime
        self._monotonic = monotonic
        self._limit = limit
        self._lock = threading.Lock()
        # digest -> (expiry, the Host it was signed in under), oldest first
        self._live: collections.OrderedDict[bytes, tuple[float, str]] = collections.OrderedDict()

    @property
    def lifetime(self) -> float:
        """Seconds a session lasts (the cookie's Max-Age)."""
        return self._lifetime

    def create(self, host: str) -> str:
        """Start a session signed in under `host`; return the cookie value (only its digest is kept)."""
        value = secrets.token_urlsafe(32)
        with self._lock:
            self._live[_digest(value)] = (self._monotonic() + self._lifetime, host)
            while len(self._live) > self._limit:
                self._live.popitem(last=False)
        return value

    def check(self, value: str, host: str) -> str | None:
        """Return the session's key (for its CSRF token) if `value` is a live session of `host`, else None."""
        key = _digest(value)
        with self._lock:
            live = self._live.get(key)
            if live is None:
                return None
            if self._monotonic() >= live[0]:
                del self._live[key]
                return None
        return key.hex() if live[1] == host else None

    def revoke(self, value: str) -> bool:
        """End the session `value` (sign-out); True if it was live."""
        with self._lock:
            return self._live.pop(_digest(value), None) is not None


class Devices:
    """Device cookies of browsers that signed in: a nonce and its HMAC under the token.

    One outlives a restart but not a change of token. It grants nothing: it only has its sign-ins
    counted against itself rather than its address (`SignInLimiter`).
    """

    def __init__(self, token: bytes) -> None:
        self._key = hmac.new(token, b"persched device cookies", hashlib.sha256).digest()

    def _mac(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode(), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """Return a new device cookie value."""
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{self._mac(nonce)}"

    def check(self, value: str | None) -> str | None:
        """Return the device's nonce if `value` is one of this token's device cookies, else None."""
        nonce, dot, mac = (value or "").partition(".")
        if not dot or not nonce or not hmac.compare_digest(mac, self._mac(nonce)):
            return None
        return nonce


class SignInLimiter:
    """Failed sign-ins over `SIGN_IN_WINDOW`: per client, and from all untrusted clients.

    A client is an address, or a trusted device, whose failures count against it alone. While a limit
    is reached every sign-in of that client is refused, the right token too: guessing gets no answer.
    """

    def __init__(
        self,
        monotonic: Callable[[], float],
        per_client: int = SIGN_IN_FAILURES_PER_CLIENT,
        total: int = SIGN_IN_FAILURES_TOTAL,
        window: float = SIGN_IN_WINDOW,
    ) -> None:
        self._monotonic = monotonic
        self._per_client = per_client
        self._total = total
        self._window = window
        self._lock = threading.Lock()
        # (when, client), oldest first: the untrusted ones, and each trusted device's.
        self._failures: collections.deque[tuple[float, str]] = collections.deque()
        self._trusted: dict[str, collections.deque[float]] = {}

    def _forget_old(self, now: float) -> None:
        while self._failures and self._failures[0][0] <= now - self._window:
            self._failures.popleft()
        for client in [c for c, times in self._trusted.items() if times[-1] <= now - self._window]:
            del self._trusted[client]  # every failure of it is old: nothing to keep

    def retry_after(self, client: str, *, trusted: bool = False) -> float | None:
        """Return the seconds until `client` may try again, or None if it may now."""
        now = self._monotonic()
        with self._lock:
            self._forget_old(now)
            if trusted:
                mine = list(self._trusted.get(client, ()))
            else:
                mine = [at for at, who in self._failures if who == client]
            waits = []
            if len(mine) >= self._per_client:
                waits.append(mine[-self._per_client] + self._window - now)
            if not trusted and len(self._failures) >= self._total:
                waits.append(self._failures[-self._total][0] + self._window - now)
        return max(waits) if waits else None

    def failed(self, client: str, *, trusted: bool = False) -> None:
        """Count a failed sign-in of `client`."""
        now = self._monotonic()
        with self._lock:
            self._forget_old(now)
            if trusted:
                times = self._trusted.setdefault(client, collections.deque(maxlen=self._per_client))
                times.append(now)
                return
            self._failures.append((now, client))
            while len(self._failures) > self._total:  # older ones no longer decide anything
                self._failures.popleft()


class Access:
    """Who may act on one dashboard: by the access token, by the application's hook, or nobody (read-only).

    Args:
        token: The access token that a browser signs in with (``persched web``); None: no sign-in.
        authorize: The application's hook (the dashboard mounted in an app); None: none.
        secret: Keys the CSRF tokens of forms; None: random per process.
        session_seconds: How long a sign-in with the token lasts.
        monotonic: The clock of session expiry and of the sign-in limit (seconds).
    """

    def __init__(
        self,
        token: str | None,
        authorize: Authorize | None,
        secret: bytes | None,
        session_seconds: float,
        monotonic: Callable[[], float],
    ) -> None:
        self.token = None if token is None else token.encode()
        self.devices = None if self.token is None else Devices(self.token)
        self.authorize = authorize
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self.sessions = Sessions(session_seconds, monotonic)
        self.sign_ins = SignInLimiter(monotonic)

    @property
    def read_only(self) -> bool:
        """Whether nobody may act here: neither a token nor a hook."""
        return self.token is None and self.authorize is None

    def actor(self, request: Request) -> Actor | None:
        """Return who acts in `request`, or None: it may only read."""
        if self.authorize is not None:
            name = self.authorize(request.environ)
            return None if not name else Actor(str(name), f"user:{name}")
        if self.token is None or request.cookie is None:
            return None
        session = self.sessions.check(request.cookie, request.host)
        return None if session is None else Actor("a token session", f"session:{session}")

    def csrf(self, actor: Actor) -> str:
        """Return the CSRF token of the forms that `actor` is shown."""
        return csrf_token(self._secret, actor.key)

    def csrf_matches(self, actor: Actor, given: str) -> bool:
        """Whether `given` is `actor`'s CSRF token (in constant time)."""
        return same_secret(given, self.csrf(actor).encode())


def read_token_file(path: str) -> tuple[str, str | None]:
    """Return the token in file `path` (its first line) and a warning if others may read the file.

    Raises:
        PerschedError: The file cannot be read, is not a regular file, is empty or too large.
    """
    try:
        # O_NONBLOCK: opening a FIFO to read would wait for a writer (a silent hang at start-up).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise PerschedError(f"--token-file: cannot read {path}: {exc.strerror or exc}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # a FIFO, a device, a directory: never a token file
        os.close(fd)
        raise PerschedError(f"--token-file: {path} is not a regular file")
    with open(fd, "rb") as file:
        try:
            data = file.read(MAX_TOKEN_FILE_BYTES + 1)
        except OSError as exc:
            raise PerschedError(f"--token-file: cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise PerschedError(f"--token-file: {path} is larger than {MAX_TOKEN_FILE_BYTES} bytes: not a token file")
    try:
        lines = data.decode("utf-8").strip().splitlines()
    except UnicodeDecodeError:
        raise PerschedError(f"--token-file: {path} is not UTF-8 text") from None
    if not lines or not lines[0].strip():
        raise PerschedError(f"--token-file: {path} is empty")
    warning = None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warning = f"--token-file {path} can be read by other users (mode {stat.filemode(mode)}): chmod 600 it"
    return lines[0].strip(), warning


def resolve_token(
    flag: str | None, path: str | None, environ: dict[str, str] | os._Environ[str], env_name: str
) -> tuple[str | None, list[str]]:
    """Return the access token of ``persched web`` and the warnings to log about it.

    From ``--token-file`` (`path`), else ``--token`` (`flag`, with a warning: the process list shows it),
    else the environment variable `env_name`.

    Raises:
        PerschedError: The token file cannot be used.
    """
    if path is not None:
        token, warning = read_token_file(path)
        return token, [warning] if warning else []
    if flag is not None:
        return flag, [
            f"--token is visible to every local user in the process list (/proc/PID/cmdline, ps):"
            f" pass it in ${env_name} or --token-file instead"
        ]
    return environ.get(env_name) or None, []
