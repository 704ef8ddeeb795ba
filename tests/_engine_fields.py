"""Field tests through the real engine: one ``Session(profile="ram")`` per test module, each
call adds its matrices as fresh models and runs ``compute.apply`` on a scope holding just
those models (stored values are reused whatever the options, so every option set gets its
own models), then reads the values back with ``results.get``.

What a test gets back per requested field: the stored value, :class:`Failed` (the run
report names a failure for that slice and field) or :data:`NA` (not applicable: the engine
stored nothing and reported no failure, e.g. a spectral field on a 1-D slice).
"""

from __future__ import annotations

import itertools
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from diffract import FieldNotComputedError, KernelFailureWarning, Session


@dataclass(frozen=True)
class Failed:
    """A value the run report lists as failed; ``error`` is the report's text
    (``"ValueError: ..."``)."""

    error: str


class _NA:
    def __repr__(self) -> str:
        return "NA"


#: the engine stored nothing for this value and reported no failure
NA = _NA()


class FieldFailedError(Exception):
    """Raised by :meth:`FieldSession.field` when the run report lists the value as failed."""


@dataclass
class FieldRun:
    """One ``apply``: the report, and the values per (given) model and slice name.

    ``values[model][name][field]``; model-level fields under ``values[model][None]``.
    """

    report: Any
    values: dict[str, dict[str | None, dict[str, Any]]]


class FieldSession:
    """A module's engine session (see the module docstring); use it as a module-scoped
    fixture and :meth:`close` it at the end."""

    def __init__(self) -> None:
        self.session = Session(profile="ram")
        self._ids = itertools.count()

    def close(self) -> None:
        """Release the session's store."""
        self.session.close()

    def run(
        self,
        models: dict[str, dict[str, np.ndarray]],
        fields: list[str],
        *,
        reference: str | None = None,
        **options: Any,
    ) -> FieldRun:
        """Add ``models`` (``{model: {slice name: array}}``) under fresh ids, apply
        ``fields`` with ``options`` (and ``reference``, a key of ``models``), read back."""
        n = next(self._ids)
        ids = {m: f"{m}-{n}" for m in models}
        if reference is not None:
            options["reference"] = ids[reference]
        try:
            for m, weights in models.items():
                self.session.models.add(weights, model_id=ids[m])
            scope = self.session.filter(model_ids=list(ids.values()))
            with warnings.catch_warnings():
                # failures come back as Failed values, for the test to judge
                warnings.simplefilter("ignore", KernelFailureWarning)
                report = scope.compute.apply(*fields, progress=False, **options)
            values = {
                m: self._read_model(scope, report, ids[m], weights, fields, options)
                for m, weights in models.items()
            }
        finally:  # keep the module's store small
            for mid in ids.values():
                if mid in self.session.models:
                    self.session.models.remove(mid)
        # a value neither stored nor failed must be one the report counts as not applicable
        n_na = sum(v is NA for per in values.values() for row in per.values() for v in row.values())
        assert n_na == report.not_applicable, (n_na, str(report))
        return FieldRun(report, values)

    def _read_model(self, scope, report, mid, weights, fields, options):
        failed = {(f.model_id, f.name, f.field): f.error for f in report.failures}
        levels = {f: self.session.registry.producer(f).level for f in fields}
        per: dict[str | None, dict[str, Any]] = {name: {} for name in weights}
        per[None] = {}
        for f in fields:
            if levels[f] == "model":
                per[None][f] = _read(scope, failed, mid, "", f, mid)
                continue
            ref = options.get("reference") if levels[f] == "cross" else None
            if ref == mid:
                continue  # a model is not compared with itself
            for name in weights:
                per[name][f] = _read(scope, failed, mid, name, f, name, reference=ref)
        return per

    def run_fields(
        self, weights: dict[str, np.ndarray], fields: list[str], **options: Any
    ) -> dict[str | None, dict[str, Any]]:
        """One model: ``{slice name: {field: value}}``; model-level fields under None."""
        return self.run({"m": weights}, fields, **options).values["m"]

    def field(self, w: np.ndarray, name: str, **options: Any) -> Any:
        """The value of one field of one matrix; a reported failure raises
        :class:`FieldFailedError` with the report's text."""
        v = self.run_fields({"w": w}, [name], **options)["w"][name]
        if isinstance(v, Failed):
            raise FieldFailedError(v.error)
        assert v is not NA, f"{name} not applicable to a {w.shape} matrix"
        return v


def _read(scope, failed, model_id, name, field, key, reference=None):
    if (model_id, name, field) in failed:
        return Failed(failed[(model_id, name, field)])
    try:
        if reference is None:
            return scope.results.get(field, key, model_id)
        return scope.results.get(field, key, model_id, reference=reference)
    except FieldNotComputedError:
        return NA


def assert_failed(value: Any, kind: str = "ValueError", match: str | None = None) -> None:
    """Assert that ``value`` is a reported failure raised as ``kind`` (an exception class
    name), its text matching the regular expression ``match``."""
    assert isinstance(value, Failed), f"expected a reported {kind}, got {value!r}"
    assert value.error.split(":", 1)[0] == kind, value.error
    if match is not None:
        assert re.search(match, value.error), value.error
