"""The figure kinds: name -> spec builder, with what data each needs.

This table is the only list of figure kinds. ``FieldPanel(kind=...)``, the HTML report,
``session.viz.<kind>(...)`` and the server's ``/diffract/api/figure?kind=...`` route read it,
so a new kind is one module under :mod:`diffract.viz.kinds` and one entry in :data:`KINDS`.

Every builder takes ``(scope, request)`` and returns a spec ``{"data": [...], "layout":
{...}}`` (Plotly's figure format, plain dicts); :func:`check` turns loose parameters into a
:class:`Request` and says, naming the parameter, what a kind is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from diffract._errors import InvalidArgumentError
from diffract.viz.kinds import alpha_errorbars, compare, diagnosis, esd_full, esd_grid, evolution
from diffract.viz.kinds.diff import diff_spec
from diffract.viz.kinds.heatmap import heatmap_spec
from diffract.viz.kinds.layers import layers_spec
from diffract.viz.kinds.scatter import scatter_spec


@dataclass(frozen=True)
class Request:
    """What one figure is drawn from: its fields, models, slice and options.

    Attributes:
        fields: the fields drawn (a scatter's ``(x, y)``).
        models: model ids (a compare figure's ``[a, b]``); None: every model of the scope.
        slice: the uid (or name) of the slice of a per-slice figure (``esd``).
        model_id: the model of a slice given by name.
        reference: the reference model of cross-model fields.
        mode: a compare figure's ``"difference"`` or ``"ratio"``.
        run: the tracked run of an evolution figure.
        slices: the slices of a grid (uids or names); None: every slice with the data.
    """

    fields: tuple[str, ...] = ()
    models: list[str] | None = None
    slice: str | None = None
    model_id: str | None = None
    reference: str | None = None
    mode: str = "difference"
    run: str | None = None
    slices: list[str] | None = None


Builder = Callable[[Any, Request], dict[str, Any]]


@dataclass(frozen=True)
class FigureKind:
    """One figure kind and the data it needs.

    Attributes:
        name: the kind's name (``FieldPanel(kind=name)``, ``?kind=name``).
        build: ``(scope, request) -> spec``.
        title: one line saying what it draws.
        fields: how many fields it needs (0: none; it reads fixed fields).
        default_fields: the fields drawn when none are given.
        slice: whether it needs a slice (``slice=`` uid or name).
        pair: whether it needs exactly two models (``models=[a, b]``).
        panel: whether ``FieldPanel`` offers it.
        report: whether the HTML report draws it (with ``default_fields``).
        prepare: ``(scope, request) -> request``: resolves defaults (the scope's two models,
            its only run) and checks them against the store; None: nothing to resolve.
    """

    name: str
    build: Builder
    title: str
    fields: int = 1
    default_fields: tuple[str, ...] = ()
    slice: bool = False
    pair: bool = False
    panel: bool = True
    report: bool = False
    prepare: Callable[[Any, Request], Request] | None = None

    def needs(self) -> dict[str, Any]:
        """What the kind reads, as the server lists it: ``{"fields", "slice", "models"}``."""
        return {
            "fields": self.fields,
            "slice": self.slice,
            "models": "two" if self.pair else "any",
        }


def _layers(style: str) -> Builder:
    def build(scope: Any, r: Request) -> dict[str, Any]:
        return layers_spec(scope, r.fields[0], models=r.models, kind=style, reference=r.reference)

    return build


def _compare(scope: Any, r: Request) -> dict[str, Any]:
    from diffract.tracking.ledger import complete_scope

    # compare reads every row (the other kinds leave incomplete checkpoints out themselves)
    scope = complete_scope(scope, keep=[*(r.models or ()), *filter(None, [r.reference])])
    return compare.compare_spec(
        scope, r.fields[0], models=r.models, mode=r.mode, reference=r.reference
    )


def _prepare_compare(scope: Any, r: Request) -> Request:
    if r.mode not in compare.MODES:
        raise InvalidArgumentError(f"mode must be one of {compare.MODES}, got {r.mode!r}")
    models = list(compare.compare_models(scope, r.models))
    compare.common_slices(scope, *models)
    return dataclasses.replace(r, models=models)


def _prepare_evolution(scope: Any, r: Request) -> Request:
    return dataclasses.replace(r, run=evolution.pick_run(scope, r.run))


def _prepare_diff(scope: Any, r: Request) -> Request:
    return dataclasses.replace(r, models=list(compare.compare_models(scope, r.models)))


def _esd_full(scope: Any, r: Request) -> dict[str, Any]:
    assert r.slice is not None  # check() asks for it
    return esd_full.esd_full_spec(scope, r.slice, model_id=r.model_id)


#: every figure kind, in the order panels list them
KINDS: dict[str, FigureKind] = {
    k.name: k
    for k in (
        FigureKind("line", _layers("line"), "a field across depth, one line per model"),
        FigureKind("bar", _layers("bar"), "a field across depth, grouped bars per model"),
        FigureKind(
            "heatmap",
            lambda s, r: heatmap_spec(s, r.fields[0], models=r.models, reference=r.reference),
            "a field as layer x model (or checkpoint)",
        ),
        FigureKind(
            "esd",
            _esd_full,
            "one slice's spectrum with its power-law fit, xmin line, MP bulk, randomized ESD",
            default_fields=("esd",),
            slice=True,
        ),
        FigureKind(
            "scatter",
            lambda s, r: scatter_spec(
                s, r.fields[0], r.fields[1], models=r.models, reference=r.reference
            ),
            "two fields against each other, one colour per model",
            fields=2,
        ),
        FigureKind(
            "compare",
            _compare,
            "model b against model a per slice (difference or ratio)",
            pair=True,
            prepare=_prepare_compare,
        ),
        FigureKind(
            "evolution",
            lambda s, r: evolution.evolution_spec(s, r.fields[0], run=r.run, reference=r.reference),
            "a tracked run: layer x step heatmap and one line per layer",
            prepare=_prepare_evolution,
        ),
        FigureKind(
            "layers",
            _layers("line"),
            "a field across depth (the line kind, by its figure's name)",
            panel=False,
        ),
        FigureKind(
            "esd_grid",
            lambda s, r: esd_grid.esd_grid_spec(s, r.slices),
            "the ESD of many slices in a grid",
            fields=0,
            panel=False,
        ),
        FigureKind(
            "alpha_errorbars",
            lambda s, r: alpha_errorbars.alpha_errorbars_spec(
                s, r.fields[0], models=r.models, reference=r.reference
            ),
            "a power-law alpha per layer with its standard error",
            default_fields=("pl_alpha",),
            report=True,
        ),
        FigureKind(
            "diagnosis",
            lambda s, r: diagnosis.diagnosis_spec(s, models=r.models),
            "which layers each diagnosis rule flags (hover: the reason, with its numbers)",
            fields=0,
            # what a panel watches for new values; the figure reads every diag_* field
            default_fields=("diag_over_trained",),
        ),
        FigureKind(
            "diff",
            lambda s, r: diff_spec(s, list(r.models or ())),
            "fine-tune diff of models [base, tuned]: relative change, update kind, signal share",
            fields=0,
            pair=True,
            prepare=_prepare_diff,
        ),
    )
}


def kind(name: str) -> FigureKind:
    """The kind called ``name``.

    Raises:
        InvalidArgumentError: no such kind (the message lists them).
    """
    if not isinstance(name, str) or name not in KINDS:
        raise InvalidArgumentError(f"unknown figure kind {name!r}; kinds: {list(KINDS)}")
    return KINDS[name]


def panel_kinds() -> tuple[str, ...]:
    """The kinds ``FieldPanel`` offers, in order."""
    return tuple(n for n, k in KINDS.items() if k.panel)


def check(
    name: str,
    fields: str | Sequence[str] | None = None,
    **params: Any,
) -> tuple[FigureKind, Request]:
    """The kind and the request for it, checked for what the kind needs.

    Args:
        name: the kind.
        fields: a field or fields (default: the kind's ``default_fields``).
        **params: the other :class:`Request` attributes (``models``, ``slice``, ...).

    Returns:
        ``(kind, request)``.

    Raises:
        InvalidArgumentError: an unknown kind or parameter, too few or too many fields, a
            missing slice.
    """
    k = kind(name)
    unknown = set(params) - {f.name for f in dataclasses.fields(Request) if f.name != "fields"}
    if unknown:
        raise InvalidArgumentError(f"{name}: unknown parameter(s) {sorted(unknown)}")
    chosen = [fields] if isinstance(fields, str) else list(fields or k.default_fields)
    if k.fields and len(chosen) != k.fields:
        raise InvalidArgumentError(
            f"{name} needs {k.fields} field{'s' * (k.fields != 1)}, got {len(chosen)}: {chosen}"
        )
    if k.slice and not params.get("slice"):
        raise InvalidArgumentError(f"{name} needs a slice (its uid, or name with model_id)")
    if params.get("models") is not None:
        params["models"] = list(params["models"])
    if params.get("slices") is not None:
        params["slices"] = list(params["slices"])
    return k, Request(fields=tuple(chosen), **params)


def build(scope: Any, name: str, fields: str | Sequence[str] | None = None, **params: Any) -> Any:
    """The spec of kind ``name`` drawn from ``scope`` (checked, defaults resolved).

    Args:
        scope: the session or scope whose stored fields are drawn.
        name: the kind.
        fields: its field(s).
        **params: the other :class:`Request` attributes.

    Returns:
        ``{"data": traces, "layout": layout}`` as plain dicts.
    """
    k, r = check(name, fields, **params)
    if k.prepare is not None:
        r = k.prepare(scope, r)
    return k.build(scope, r)
