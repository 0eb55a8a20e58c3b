"""Callables <-> ``"module:qualname"`` references that another process can import again (never pickle)."""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from ..errors import InvalidJobError
from .models import shown

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["TargetNotFound", "TargetRefused", "normalize_allowed", "reference_of", "resolve"]


def _is_reference(text: str) -> bool:
    """``"package.module:qualname"``: dotted identifiers (Unicode ones too) on both sides, nothing else."""
    module, colon, qualname = text.partition(":")
    return bool(colon) and all(part.isidentifier() for part in (*module.split("."), *qualname.split(".")))


MAX_TARGET_LENGTH = 1000  # characters: persched_jobs.target is String(1000)
_HOW = "pass a module-level function, or a string 'package.module:function'"


class TargetNotFound(Exception):
    """A stored reference no longer resolves to a callable (internal)."""


class TargetRefused(TargetNotFound):
    """A stored reference names a module outside `allowed_modules` (internal)."""


def normalize_allowed(allowed: Iterable[str] | str | None) -> tuple[str, ...] | None:
    """Check an `allowed_modules` argument: None, or module names / prefixes."""
    if allowed is None:
        return None
    given: object = allowed  # callers may pass anything: refuse it cleanly
    if isinstance(given, str):
        names: tuple[object, ...] = (given,)
    elif isinstance(given, Iterable):
        names = tuple(given)
    else:
        names = ()
    if not names or not all(isinstance(m, str) and m.strip(". ") for m in names):
        raise InvalidJobError("allowed_modules", f"must be module names or prefixes, got {allowed!r}")
    return tuple(str(m).strip(". ") for m in names)


def _is_allowed(module_name: str, allowed: tuple[str, ...] | None) -> bool:
    # "myapp" allows myapp and myapp.tasks, never myapplication.
    return allowed is None or any(module_name == p or module_name.startswith(p + ".") for p in allowed)


def resolve(reference: str, allowed: tuple[str, ...] | None = None) -> Callable[..., Any]:
    """Import `reference` ("module:qualname") and return the callable.

    With `allowed`, a module outside it is refused before anything is
    imported: whoever can write the database must not be able to run
    arbitrary code through a row's target. The callable must also be
    *defined* in an allowed module: the qualified name may not pass
    through another module (``"allowed:os.system"``), and what it names must
    have an allowed ``__module__`` (``"allowed:system"`` after
    ``from os import system`` is refused too).

    Raises:
        TargetRefused: the module is not in `allowed`, or the reference
            reaches a callable defined elsewhere (never called).
        TargetNotFound: the reference is malformed, the module or attribute
            is missing, or it is not callable.
    """
    if not _is_reference(reference):
        raise TargetNotFound(f"{reference!r} is not a reference of the form 'package.module:function'")
    module_name, _, qualname = reference.partition(":")
    if not _is_allowed(module_name, allowed):
        raise TargetRefused(f"module {module_name!r} is not in allowed_modules {list(allowed or ())}")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise TargetNotFound(f"cannot import module {module_name!r}: {exc!r}") from exc
    parts = qualname.split(".")
    try:
        for depth, part in enumerate(parts, start=1):
            obj = getattr(obj, part)
            if allowed is not None and isinstance(obj, types.ModuleType):
                through = f"{module_name}:{'.'.join(parts[:depth])}"
                # Stop before looking inside it: another module's attributes
                # (even a lazy __getattr__) are not the allowed module's code.
                raise TargetRefused(
                    f"{reference!r} reaches module {obj.__name__!r} through {through!r}; only callables "
                    f"defined in allowed_modules {list(allowed)} may run"
                )
    except AttributeError as exc:
        raise TargetNotFound(f"{module_name!r} has no attribute {qualname!r}") from exc
    if not callable(obj):
        raise TargetNotFound(f"{reference!r} is not callable")
    if allowed is not None:
        defined_in = getattr(obj, "__module__", None)
        if not isinstance(defined_in, str) or not _is_allowed(defined_in, allowed):
            raise TargetRefused(
                f"{reference!r} is defined in {defined_in!r}, not in allowed_modules {list(allowed)}; "
                "only callables defined there may run"
            )
    return obj  # type: ignore[no-any-return]  # checked callable above


def reference_of(fn: object, allowed: tuple[str, ...] | None = None) -> str:
    """Return the ``"module:qualname"`` reference of `fn`, checked to resolve back.

    Raises:
        InvalidJobError: `fn` cannot be found by reference, or is outside
            `allowed` (argument ``fn``).
    """
    if isinstance(fn, str):
        if len(fn) > MAX_TARGET_LENGTH:
            raise InvalidJobError("fn", f"a reference may have at most {MAX_TARGET_LENGTH} characters, got {len(fn)}")
        if not _is_reference(fn):
            raise InvalidJobError("fn", f"{fn!r} is not a reference of the form 'package.module:function'")
        try:
            resolve(fn, allowed)
        except TargetNotFound as exc:
            raise InvalidJobError("fn", f"{exc}") from exc
        return fn
    if not callable(fn):
        raise InvalidJobError("fn", f"{shown(fn)} is not callable; {_HOW}")
    fn = cast("Any", fn)  # mypy narrows callable objects too far for the checks below
    if isinstance(fn, types.MethodType) and not inspect.isclass(getattr(fn, "__self__", None)):
        raise InvalidJobError(
            "fn", f"{fn!r} is a method bound to an instance, which can't be found after a restart; {_HOW}"
        )
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise InvalidJobError("fn", f"{fn!r} has no module and qualified name; {_HOW}")
    if "<lambda>" in qualname:
        raise InvalidJobError("fn", f"a lambda can't be found after a restart; {_HOW}")
    if "<locals>" in qualname:
        raise InvalidJobError(
            "fn", f"{qualname!r} is defined inside a function and can't be found after a restart; {_HOW}"
        )
    if module_name == "__main__":
        raise InvalidJobError(
            "fn",
            f"{qualname!r} is defined in __main__, which another process (or a restart "
            "through 'persched run') can't import; move it into a module",
        )
    reference = f"{module_name}:{qualname}"
    if len(reference) > MAX_TARGET_LENGTH:
        raise InvalidJobError(
            "fn", f"its reference has {len(reference)} characters, more than the store keeps ({MAX_TARGET_LENGTH})"
        )
    try:
        found = resolve(reference, allowed)
    except TargetRefused as exc:
        raise InvalidJobError("fn", str(exc)) from exc
    except TargetNotFound as exc:
        raise InvalidJobError("fn", f"{reference!r} does not resolve back to {fn!r}: {exc}; {_HOW}") from exc
    if not _same_callable(found, fn):
        raise InvalidJobError("fn", f"{reference!r} resolves to another object than {fn!r}; {_HOW}")
    return reference


def _same_callable(a: object, b: object) -> bool:
    if a is b:
        return True
    # Class methods are bound anew on every attribute access.
    if not (isinstance(a, types.MethodType) and isinstance(b, types.MethodType)):
        return False
    return a.__func__ is b.__func__ and a.__self__ is b.__self__
