"""Checkpoint ids of a tracked run: ``<run>-s<step, zero-padded to 9 digits>``.

Model ids may not contain ``@ [ ] , /``, so ``run@step`` is not an id. A tracked checkpoint is
stored as ``f"{run}-s{step:09d}"`` (``"mnist-s000000100"`` for step 100 of run ``"mnist"``):
within a run the ids sort as strings in step order up to step 999,999,999 (a larger step gets
more digits and is still stored, but only its meta then orders it). The id is a convenience for
people and string-sorted listings; the order that counts is the step stored in the model's
meta (``{"track": {"run": ..., "step": ...}}``, :mod:`diffract._vocab.steps`), which every
listing of checkpoints reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from diffract._errors import InvalidArgumentError, InvalidModelIdError
from diffract._vocab.filters import REGEX_PREFIX
from diffract._vocab.slices import validate_model_id

#: digits of the zero-padded step in a checkpoint id
STEP_DIGITS = 9

_ID = re.compile(rf"^(?P<run>.+)-s(?P<step>\d{{{STEP_DIGITS},}})$")


def check_run(run: object) -> str:
    """``run`` if it can name a tracked run (a valid model id prefix), else a named error.

    Args:
        run: the run's name.

    Returns:
        The name.

    Raises:
        InvalidArgumentError: not a non-empty string.
        InvalidModelIdError: it contains a character model ids may not have (``@ [ ] , /``),
            or starts with ``re:`` (filters would read its checkpoint ids as regexes).
    """
    if not isinstance(run, str) or not run.strip():
        raise InvalidArgumentError(
            f"a tracked run needs a non-empty string name, e.g. session.track('mnist', ...); got {run!r}"
        )
    if run.startswith(REGEX_PREFIX):
        raise InvalidModelIdError(
            f"run name {run!r} starts with {REGEX_PREFIX!r}: its checkpoint ids would too, and "
            "filters read an id starting with 're:' as a regular expression (it would select "
            "other runs' checkpoints); a run name may not start with 're:'"
        )
    validate_model_id(run)
    return run


def literal_ids(model_ids: Iterable[str]) -> list[str]:
    """Filter entries that select exactly ``model_ids``, never by pattern.

    New ids cannot start with ``re:`` (:func:`~diffract._vocab.slices.validate_model_id`), but
    a store written before that rule may hold one: such an id is passed to
    ``filter(model_ids=...)`` as the regular expression that matches only itself.

    Args:
        model_ids: stored model ids.

    Returns:
        The filter entries, in the same order.
    """
    return [f"{REGEX_PREFIX}{re.escape(m)}" if m.startswith(REGEX_PREFIX) else m for m in model_ids]


def check_step(step: object) -> int:
    """``step`` if it is a training step (an int >= 0), else a named error.

    Args:
        step: the step.

    Returns:
        The step.

    Raises:
        InvalidArgumentError: not an int (bools refused) or negative.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidArgumentError(f"step must be an int >= 0, got {step!r}")
    return int(step)


def checkpoint_id(run: str, step: int) -> str:
    """The model id of step ``step`` of run ``run`` (``"mnist-s000000100"``).

    Args:
        run: the run's name.
        step: the training step (an int >= 0).

    Returns:
        The id.

    Raises:
        InvalidArgumentError: a bad run name or step.
    """
    return f"{check_run(run)}-s{check_step(step):0{STEP_DIGITS}d}"


def parse_checkpoint_id(model_id: str) -> tuple[str, int] | None:
    """``(run, step)`` of an id made by :func:`checkpoint_id`, or None for other ids.

    Args:
        model_id: a model id.

    Returns:
        The run and step it names, or None.
    """
    m = _ID.match(model_id)
    return None if m is None else (m.group("run"), int(m.group("step")))
