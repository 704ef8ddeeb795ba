"""What the sampling modules share: SamplingError, the reasons and modes, canonical JSON
and hashes, and the checks of input values. Standard library only."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from diffract._errors import DiffractError
from diffract._vocab.jsonable import canonical_json as _canonical_json

T = TypeVar("T")


class SamplingError(DiffractError, ValueError):
    """A sampling input, policy or manifest is malformed."""


# --- reasons, modes -----------------------------------------------------------------------

REASON_ELIGIBLE = "eligible"
#: the teacher's own block (replacement mode): the reference the others replace
REASON_TEACHER_ANCHOR = "teacher_anchor"
#: the candidate (or subblock) disables a subblock that the teacher has active
REASON_NO_OP = "no_op"
#: same content as a record kept instead (the teacher's, or the smaller candidate_id)
REASON_DUPLICATE = "duplicate"
#: more than two changed axes
REASON_TOO_MANY_AXES = "too_many_axes"
#: no teacher block at the candidate's (hidden_width, layer_idx), or no such subblock in it
REASON_MISSING_TEACHER = "missing_teacher"
#: a two-axis signature beyond ``max_pairwise_per_family`` in its family
REASON_PAIRWISE_LIMIT = "pairwise_limit"
#: eligible, its signature is represented by another record (subblock mode)
REASON_NOT_SELECTED = "not_selected"
#: eligible, but the width's ``replacement_cap`` was used up (replacement mode)
REASON_OVER_CAP = "over_cap"

EXCLUSION_REASONS: tuple[str, ...] = (
    REASON_TEACHER_ANCHOR,
    REASON_MISSING_TEACHER,
    REASON_NO_OP,
    REASON_TOO_MANY_AXES,
    REASON_DUPLICATE,
    REASON_PAIRWISE_LIMIT,
    REASON_NOT_SELECTED,
    REASON_OVER_CAP,
)
ALL_REASONS = frozenset((REASON_ELIGIBLE, *EXCLUSION_REASONS))

MODE_REPLACEMENT = "replacement"
MODE_SUBBLOCK = "subblock"
MODES: tuple[str, ...] = (MODE_REPLACEMENT, MODE_SUBBLOCK)

#: ``Candidate.source`` of the teacher's own block
SOURCE_TEACHER = "self"

#: ``subblock_kind`` / ``subblock_name`` of a whole-layer record (replacement mode)
BLOCK_KIND = "block"

SAMPLE_ID_HEX = 16


# --- canonical JSON and hashes --------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, no whitespace, UTF-8 kept, NaN refused.

    Args:
        value: JSON data.

    Returns:
        The text (:func:`diffract._vocab.jsonable.canonical_json`).

    Raises:
        SamplingError: the value holds something JSON cannot (NaN included).
    """
    try:
        return _canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise SamplingError(
            f"value is not JSON-ready ({exc}): use dicts with string keys, lists, str, int, "
            "finite float, bool or None"
        ) from None


def stable_hash(value: Any) -> str:
    """sha256 hex digest of ``canonical_json(value)``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def json_copy(value: Any, what: str) -> Any:
    """A deep, JSON-normalized copy (tuples become lists); raises naming ``what``."""
    try:
        return json.loads(canonical_json(value))
    except SamplingError as exc:
        raise SamplingError(f"{what}: {exc}") from None


def check_str(value: Any, what: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    if not allow_empty and not value:
        raise SamplingError(f"{what} must be a non-empty string")
    return value


def check_int(value: Any, what: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}: {value!r}")
    if minimum is not None and value < minimum:
        raise SamplingError(f"{what} must be >= {minimum}, got {value}")
    return value


def check_width(value: Any, what: str) -> int | None:
    if value is None:
        return None
    return check_int(value, what, minimum=1)


def check_place(obj: Any, owner: str) -> None:
    """Check where a candidate (or a record of one) sits: ``candidate_id``, ``layer_idx``,
    ``hidden_width``; ``owner`` is the class name the errors give."""
    check_str(obj.candidate_id, f"{owner}.candidate_id")
    check_int(obj.layer_idx, f"{owner}.layer_idx", minimum=0)
    check_width(obj.hidden_width, f"{owner}.hidden_width")


def from_mapping(cls: Callable[..., T], d: dict[str, Any], what: str) -> T:
    """``cls(**d)``, with a key the class does not take (or one it needs and lacks) raised as
    a :class:`SamplingError` saying ``bad <what> mapping``."""
    try:
        return cls(**d)
    except TypeError as exc:
        if "unexpected keyword" in str(exc) or "missing" in str(exc):
            raise SamplingError(f"bad {what} mapping: {exc}") from None
        raise


def place_dict(obj: Any) -> dict[str, Any]:
    """``candidate_id``, ``layer_idx``, ``hidden_width`` of ``obj`` as JSON-ready keys."""
    return {
        "candidate_id": obj.candidate_id,
        "layer_idx": obj.layer_idx,
        "hidden_width": obj.hidden_width,
    }
