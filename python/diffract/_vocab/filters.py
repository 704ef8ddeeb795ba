"""Filters as data: what ``session.filter(...)`` selects, as a JSON-serialisable value.

A :class:`Filter` is one ``filter(...)`` call: up to four criteria (model ids, parameter
names, parameter types, uids), ANDed together. Inside one criterion the entries are ORed;
an entry starting with ``re:`` is a regular expression that must match the whole string.
A chained ``scope.filter(...)`` adds a clause: a :class:`FilterChain` matches a slice when
every clause does. The filter-builder widget edits exactly this data.

A plain ``param_names`` entry that names no slice of a model but is the module path of one
of its weight slices selects that slice: ``"0"`` selects ``"0.weight"`` (Diffract names a
torch ``nn.Linear`` by its module path and extracts its weight only; diffract-lab names each
tensor, ``"0.weight"``, ``"0.bias"``). A name that is a slice of the model selects exactly
that slice, as before. The filter itself stays the entries as given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from diffract._errors import FilterError
from diffract._vocab.slices import ParameterType, SliceInfo

REGEX_PREFIX = "re:"
CRITERIA = ("model_ids", "param_names", "param_types", "param_ids")
#: the slice a plain name selects when it is a module path (a torch module's weight)
MODULE_WEIGHT = ".weight"


def module_path(name: str) -> str | None:
    """The module path whose weight slice ``name`` is (``"0.weight"`` -> ``"0"``), else None."""
    if name.endswith(MODULE_WEIGHT) and len(name) > len(MODULE_WEIGHT):
        return name[: -len(MODULE_WEIGHT)]
    return None


def _as_list(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, ParameterType)):
        value = [value]
    if isinstance(value, (bytes, bytearray, memoryview, Mapping)) or not isinstance(
        value, Iterable
    ):
        raise FilterError(
            f"{what} must be a list of strings, got {type(value).__name__}: {value!r}"
        )
    out = []
    for v in value:
        if isinstance(v, ParameterType):
            out.append(v.value)
        elif isinstance(v, str):
            out.append(v)
        else:
            raise FilterError(f"{what} entries must be strings, got {type(v).__name__}: {v!r}")
    return tuple(out)


#: a regex match that runs longer than this (seconds) is stopped with a FilterError
REGEX_TIMEOUT_S = 1.0

#: escapes whose meaning differs between RE2 (ASCII) and Python's ``re`` (Unicode)
_PERL_CLASSES = re.compile(r"\\[wWdDsSbB]")


class _BoundedPattern:
    """A compiled ``re:`` pattern whose matches are bounded in time.

    RE2 (``google-re2``: linear time, no backtracking) runs every pattern it accepts with
    the same meaning as Python's ``re``; a pattern it does not (backreferences, lookaround,
    Unicode ``\\w``/``\\d``/``\\s``/``\\b``) runs in the ``regex`` module with a
    :data:`REGEX_TIMEOUT_S` budget per match, and plain ``re`` only where neither is installed.

    Args:
        pattern: the regular expression (without ``re:``).
        what: the criterion it belongs to, for messages.

    Raises:
        FilterError: the pattern is not a valid regular expression.
    """

    def __init__(self, pattern: str, what: str) -> None:
        self.pattern = pattern
        self._what = what
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise FilterError(f"invalid regular expression {pattern!r} in {what}: {exc}") from None
        self._re2 = _re2_compile(pattern)
        self._timed: Any = False  # the ``regex`` form, compiled when first needed

    def fullmatch(self, value: str) -> bool:
        """Whether the whole of ``value`` matches.

        Args:
            value: the string (a model id, parameter name, type or uid).

        Returns:
            True when it matches.

        Raises:
            FilterError: the match ran past the time budget (a catastrophic pattern).
        """
        if self._re2 is not None:
            try:
                return self._re2.fullmatch(value) is not None
            except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form for RE2
                pass
        if self._timed is False:
            self._timed = _timed_compile(self.pattern)
        if self._timed is None:
            return re.fullmatch(self.pattern, value) is not None
        try:
            return self._timed.fullmatch(value, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            raise FilterError(
                f"regular expression {self.pattern!r} in {self._what} ran for more than "
                f"{REGEX_TIMEOUT_S:g} s against a {len(value)}-character string (catastrophic "
                "backtracking: nested repetition such as (a+)+); rewrite it without nested "
                "quantifiers, backreferences or lookaround"
            ) from None

    def __repr__(self) -> str:
        return f"re:{self.pattern!r}"


def _re2_compile(pattern: str) -> Any:
    """The RE2 form of ``pattern``, or None where RE2 is missing or would mean otherwise."""
    if _PERL_CLASSES.search(pattern):
        return None
    try:
        import re2  # google-re2
    except ImportError:
        return None
    try:
        options = re2.Options()
        options.log_errors = False
        return re2.compile(pattern, options)
    except Exception:  # re2.error: a construct RE2 has no linear-time form for
        return None


def _timed_compile(pattern: str) -> Any:
    try:
        import regex
    except ImportError:
        return None
    try:
        return regex.compile(pattern, flags=regex.VERSION0)
    except Exception:  # regex.error: a construct only ``re`` reads: plain ``re``
        return None


def compile_pattern(entry: str, what: str) -> _BoundedPattern | str:
    """A compiled full-match regex for ``re:`` entries, else the exact string.

    Args:
        entry: one entry of a criterion.
        what: the criterion's name, for messages.

    Returns:
        The exact string, or a pattern whose ``fullmatch`` is bounded in time.

    Raises:
        FilterError: an ``re:`` entry is not a valid regular expression.
    """
    if not entry.startswith(REGEX_PREFIX):
        return entry
    return _BoundedPattern(entry[len(REGEX_PREFIX) :], what)


@dataclass(frozen=True)
class Filter:
    """One ``filter(...)`` call: up to four criteria, ANDed together.

    Entries of one criterion are ORed; an entry starting with ``re:`` is a regular expression
    that must match the whole string. Build one with :meth:`make` (which validates).

    Attributes:
        model_ids: model ids to keep; ``None`` means "no constraint", an empty tuple matches
            nothing.
        param_names: parameter names (dotted) to keep.
        param_types: parameter types (``ParameterType`` values) to keep.
        param_ids: slice uids to keep (exact, no regular expressions).
    """

    model_ids: tuple[str, ...] | None = None
    param_names: tuple[str, ...] | None = None
    param_types: tuple[str, ...] | None = None
    param_ids: tuple[str, ...] | None = None
    _compiled: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def make(
        cls,
        model_ids: Sequence[str] | str | None = None,
        param_names: Sequence[str] | str | None = None,
        param_types: Sequence[ParameterType | str] | ParameterType | str | None = None,
        param_ids: Sequence[str] | str | None = None,
    ) -> Filter:
        """Validate and normalise the arguments of ``session.filter(...)``.

        Args:
            model_ids: one model id or several; ``re:`` entries are regular expressions.
            param_names: one parameter name or several; ``re:`` entries are regular expressions.
            param_types: parameter types, as ``ParameterType`` or their names.
            param_ids: slice uids.

        Returns:
            The filter, with its patterns compiled.

        Raises:
            FilterError: an argument is not a string or a list of strings, a type name is
                invalid, or a regular expression does not compile.
        """
        types = _as_list(param_types, "param_types")
        if types is not None:
            norm = []
            for t in types:
                if t.startswith(REGEX_PREFIX):
                    norm.append(t)
                else:
                    try:
                        norm.append(ParameterType.from_string(t).value)
                    except ValueError as exc:
                        raise FilterError(f"param_types: {exc}") from None
            types = tuple(norm)
        f = cls(
            model_ids=_as_list(model_ids, "model_ids"),
            param_names=_as_list(param_names, "param_names"),
            param_types=types,
            param_ids=_as_list(param_ids, "param_ids"),
        )
        f._compile()
        return f

    def _compile(self) -> dict[str, Any]:
        if not self._compiled and any(getattr(self, c) is not None for c in CRITERIA):
            for crit in CRITERIA:
                entries = getattr(self, crit)
                if entries is None:
                    continue
                if crit == "param_ids":
                    self._compiled[crit] = (frozenset(entries), ())
                    continue
                exact, regexes = set(), []
                for e in entries:
                    p = compile_pattern(e, crit)
                    if isinstance(p, str):
                        exact.add(p)
                    else:
                        regexes.append(p)
                self._compiled[crit] = (frozenset(exact), tuple(regexes))
        return self._compiled

    @property
    def is_empty(self) -> bool:
        """True when no criterion is set (matches everything)."""
        return all(getattr(self, c) is None for c in CRITERIA)

    def matches(self, s: SliceInfo, names: Collection[str] | None = None) -> bool:
        """Whether a slice passes every criterion of this clause.

        Args:
            s: the slice.
            names: the names of every slice of its model; with them, a plain
                ``param_names`` entry that is no slice of the model but the module path of
                ``s`` (``"0"`` for ``"0.weight"``) selects ``s``. None: exact names only.

        Returns:
            True when the slice matches.
        """
        compiled = self._compile()
        values = {
            "model_ids": s.model_id,
            "param_names": s.name,
            "param_types": s.type.value,
            "param_ids": s.uid,
        }
        for crit, (exact, regexes) in compiled.items():
            v = values[crit]
            if v in exact:
                continue
            if any(r.fullmatch(v) for r in regexes):
                continue
            if crit == "param_names" and names is not None:
                path = module_path(v)
                if path is not None and path in exact and path not in names:
                    continue
            return False
        return True

    def matches_model(self, model_id: str) -> bool:
        """Whether a model id passes the ``model_ids`` criterion.

        Args:
            model_id: the model id.

        Returns:
            True when the criterion is unset or the id matches it.
        """
        entry = self._compile().get("model_ids")
        if entry is None:
            return True
        exact, regexes = entry
        return model_id in exact or any(r.fullmatch(model_id) for r in regexes)

    def to_dict(self) -> dict[str, list[str]]:
        """The set criteria as a JSON-ready dict (unset ones are left out).

        Returns:
            ``{criterion: [entries]}`` for each criterion that is set.
        """
        return {c: list(getattr(self, c)) for c in CRITERIA if getattr(self, c) is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Filter:
        """The inverse of :meth:`to_dict`.

        Args:
            data: ``{criterion: entries}`` with keys among ``model_ids``, ``param_names``,
                ``param_types`` and ``param_ids``.

        Returns:
            The filter.

        Raises:
            FilterError: ``data`` is not a dict, has unknown keys or bad values.
        """
        if not isinstance(data, dict):
            raise FilterError(f"a filter must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(CRITERIA))
        if unknown:
            raise FilterError(f"unknown filter key(s) {unknown}; valid keys are {list(CRITERIA)}")
        return cls.make(**data)


@dataclass(frozen=True)
class FilterChain:
    """Clauses from chained ``.filter(...)`` calls; a slice must match all of them.

    Attributes:
        clauses: the :class:`Filter` clauses, in the order they were added (empty: everything
            matches).
    """

    clauses: tuple[Filter, ...] = ()

    def and_(self, f: Filter) -> FilterChain:
        """A chain with ``f`` added as one more clause (an empty ``f`` changes nothing).

        Args:
            f: the clause to add.

        Returns:
            A new chain (this one is unchanged).
        """
        if f.is_empty:
            return self
        return FilterChain((*self.clauses, f))

    @property
    def is_empty(self) -> bool:
        """True when the chain has no clause (matches everything)."""
        return not self.clauses

    def matches(self, s: SliceInfo, names: Collection[str] | None = None) -> bool:
        """Whether a slice passes every clause.

        Args:
            s: the slice.
            names: the names of every slice of its model (module paths select weight
                slices with them: see :meth:`Filter.matches`).

        Returns:
            True when every clause matches.
        """
        return all(c.matches(s, names) for c in self.clauses)

    def matches_model(self, model_id: str) -> bool:
        """Whether a model id passes the ``model_ids`` criterion of every clause.

        Args:
            model_id: the model id.

        Returns:
            True when every clause accepts the model.
        """
        return all(c.matches_model(model_id) for c in self.clauses)

    def select(self, slices: Iterable[SliceInfo]) -> list[SliceInfo]:
        """The slices that match, in their order (module paths resolved among ``slices``).

        Args:
            slices: the slices to filter (every slice of their models, for module paths).

        Returns:
            The matching slices.
        """
        slices = list(slices)
        names: dict[str, set[str]] = {}
        for s in slices:
            names.setdefault(s.model_id, set()).add(s.name)
        return [s for s in slices if self.matches(s, names[s.model_id])]

    def to_json(self) -> str:
        """Canonical JSON: a list of clause objects (``[]`` selects everything).

        Returns:
            The JSON text (sorted keys, no spaces).
        """
        return json.dumps(
            [c.to_dict() for c in self.clauses], sort_keys=True, separators=(",", ":")
        )

    @classmethod
    def from_json(cls, text: str | bytes | bytearray | list[Any] | dict[str, Any]) -> FilterChain:
        """A chain from its JSON (a list of clauses, or one clause), as text or parsed.

        Args:
            text: JSON text (``str`` or UTF-8 bytes), or the parsed list or dict.

        Returns:
            The chain.

        Raises:
            FilterError: the text is not valid JSON, or a clause is not a valid filter.
        """
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FilterError(f"filter JSON is not UTF-8 text: {exc}") from None
        if isinstance(text, str):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise FilterError(f"filter JSON is not valid JSON ({exc}): {text[:80]!r}") from None
        else:
            data = text
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list):
            raise FilterError(
                "filter JSON must be an object or a list of objects, got "
                f"{type(data).__name__}: {data!r}"[:200]
            )
        chain = cls()
        for d in data:
            chain = chain.and_(Filter.from_dict(d))
        return chain

    def key(self) -> str:
        """A short stable hash of the chain (names per-scope aggregates in the store).

        Returns:
            Eight hex digits of BLAKE2b over :meth:`to_json`.
        """
        import hashlib

        return hashlib.blake2b(self.to_json().encode(), digest_size=4).hexdigest()
