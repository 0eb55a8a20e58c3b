"""`DefinitionChecks`: `schedule()` and `declare()` arguments checked into definitions, with a scheduler's options.

It adds ``allowed_modules`` and ``max_args_bytes`` to the checks of `persched._model.models`; a failed check
raises `InvalidJobError` and nothing is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InvalidJobError
from .declare import JobSpec, SharedChecks, check_specs
from .models import validate_definition, validate_job_id, validate_policies
from .targets import reference_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from .models import JobDefinition

__all__ = ["DefinitionChecks"]


class DefinitionChecks:
    """Checks `schedule()`'s arguments, and a declaration's specs, into `JobDefinition` values.

    Args:
        allowed_modules: The modules (or package prefixes) whose callables may be scheduled; None: any.
        max_args_bytes: The largest `args`, and the largest `kwargs`, in bytes of their stored JSON.
    """

    def __init__(self, allowed_modules: tuple[str, ...] | None, max_args_bytes: int) -> None:
        self._allowed_modules = allowed_modules
        self._max_args_bytes = max_args_bytes

    def definition(
        self,
        job_id: object,
        fn: Callable[..., Any] | str,
        interval_seconds: object,
        *,
        args: object = (),
        kwargs: object = None,
        start_in: object = None,
        **options: object,
    ) -> JobDefinition:
        """The definition that `schedule()` is asked for; `options` are its keyword options."""
        checked_id = validate_job_id(job_id)
        target = reference_of(fn, self._allowed_modules)
        policies = validate_policies(interval_seconds, **options)
        return validate_definition(
            checked_id, target, policies, args, kwargs, start_in, max_args_bytes=self._max_args_bytes
        )

    def declared(self, specs: Iterable[JobSpec]) -> list[JobDefinition]:
        """The definitions of a declaration's specs, in their order (`check_specs`: each job id once)."""
        shared = SharedChecks(lambda fn: reference_of(fn, self._allowed_modules), validate_policies)
        return [self._spec_definition(spec, shared) for spec in check_specs(specs)]

    def _spec_definition(self, spec: JobSpec, shared: SharedChecks) -> JobDefinition:
        """`definition` of a spec (its id checked by `check_specs`), with the checks specs share made once."""
        options = dict(spec.options)
        args, kwargs, start_in = options.pop("args", ()), options.pop("kwargs", None), options.pop("start_in", None)
        try:
            target = shared.reference(spec.fn)
            policies = shared.policies(spec.interval_seconds, options)
            return validate_definition(
                spec.job_id, target, policies, args, kwargs, start_in, max_args_bytes=self._max_args_bytes
            )
        except InvalidJobError as exc:  # name the spec as well as its argument
            raise InvalidJobError(f"specs[{spec.job_id!r}].{exc.argument}", exc.reason) from None
