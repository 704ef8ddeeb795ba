"""``scope.weightwatcher``: WeightWatcher 0.7.7's ``analyze()``, ``get_summary()`` and
``describe()`` in one call each, with WeightWatcher's keywords, column names, column order
and row order, computed by our fields under ``conventions="weightwatcher"``.

The table is computed afresh in a private in-memory session (as WeightWatcher recomputes on
every call): stored fields of this session are neither reused (they may have been computed
with other options) nor changed. To keep fields, use ``compute.apply(...,
conventions="weightwatcher")``; :data:`COLUMNS` says which field each column comes from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from diffract._core.slices import ParameterType, SliceInfo
from diffract._errors import InvalidArgumentError
from diffract.session.scope import Namespace

#: WeightWatcher's analyze() column -> our field (the columns every analyze() has)
COLUMNS: dict[str, str] = {
    "D": "pl_ks",
    "M": "lower_dim",
    "N": "greater_dim",
    "Q": "aspect_ratio",
    "alpha": "pl_alpha",
    "alpha_weighted": "pl_alpha_weighted",
    "entropy": "matrix_entropy",
    "lambda_max": "esd_max",
    "log_alpha_norm": "pl_log_alpha_norm",
    "log_norm": "esd_log_norm",
    "log_spectral_norm": "esd_log_max",
    "matrix_rank": "matrix_rank",
    "norm": "esd_norm",
    "num_evals": "num_evals",
    "num_pl_spikes": "pl_num_spikes",
    "rank_loss": "rank_loss",
    "rf": "receptive_field",
    "sigma": "pl_alpha_sigma",
    "spectral_norm": "esd_max",
    "stable_rank": "stable_rank",
    "sv_max": "max_weights_sval",
    "sv_min": "max_kernel_min_sval",
    "warning": "pl_warning",
    "weak_rank_loss": "weak_rank_loss",
    "xmax": "pl_esd_xmax",
    "xmin": "pl_esd_xmin",
}
#: the columns each analyze() keyword adds: keyword -> {WeightWatcher column: our field}
OPTION_COLUMNS: dict[str, dict[str, str]] = {
    "fix_fingers": {"num_fingers": "pl_num_fingers", "raw_alpha": "pl_raw_alpha"},
    "mp_fit": {
        "W_scale": "mp_fit_w_scale",
        "bulk_max": "mp_fit_bulk_max",
        "bulk_min": "mp_fit_bulk_min",
        "mp_softrank": "mp_fit_soft_rank",
        "num_spikes": "mp_fit_num_spikes",
        "sigma_mp": "mp_fit_sigma",
    },
    "randomize": {
        "max_rand_eval": "esd_rand_max",
        "num_traps": "num_traps",
        "rand_W_scale": "rand_mp_fit_w_scale",
        "rand_bulk_max": "rand_mp_fit_bulk_max",
        "rand_bulk_min": "rand_mp_fit_bulk_min",
        "rand_distance": "js_rand_distance",
        "rand_mp_softrank": "rand_mp_fit_soft_rank",
        "rand_num_spikes": "rand_mp_fit_num_spikes",
        "rand_sigma_mp": "rand_mp_fit_sigma",
        "ww_maxdist": "rand_max_dist",
        "ww_softrank": "rand_soft_rank",
    },
    "detX": {
        "ERG_gap": "erg_gap",
        "detX_num": "detx_num_spikes",
        "detX_val": "detx_esd_val",
        "detX_val_unrescaled": "detx_rescaled_val",
        "num_ERG_spikes": "detx_num_spikes",
    },
    "vectors": {
        f"{side}_{stat}_{metric}": f"{metric}_{side}_{stat}"
        for side in ("bulk", "tail")
        for stat in ("mean", "var")
        for metric in ("vec_entropy", "loc_ratio", "part_ratio")
    },
}
#: WeightWatcher's get_summary() key -> the details column it averages (in its order)
SUMMARY_COLUMNS = (
    "log_norm",
    "alpha",
    "alpha_weighted",
    "log_alpha_norm",
    "log_spectral_norm",
    "stable_rank",
    "mp_softrank",
)
#: describe()'s columns (WeightWatcher's order) -> our field
DESCRIBE_COLUMNS = {
    "M": "lower_dim",
    "N": "greater_dim",
    "Q": "aspect_ratio",
    "num_evals": "num_evals",
    "rf": "receptive_field",
}
#: keywords WeightWatcher takes that have another home here: keyword -> what to use instead
INSTEAD: dict[str, str] = {
    "plot": "figures are Plotly objects of session.viz: session.viz.esd('<slice name>') for "
    "a layer's ESD and its power-law fit, session.viz.esd_grid() for every layer (after "
    "compute.apply('esd', 'pl_alpha', conventions='weightwatcher')); fig.show() or "
    "fig.write_image(path)",
    "savefig": "save a session.viz figure with fig.write_image(path) or fig.write_html(path)",
    "deltas": "WeightWatcher only plots them: compute.apply('esd_deltas', "
    "'level_spacing_ratio') stores the level spacings and their ratio",
    "model": "add the model first (session.models.add(model, model_id=...)), then call "
    "session.filter(model_ids=...).weightwatcher.analyze(...); pool=, intra=, base_model= "
    "and peft= are options of models.add here",
    "min_size": "min_evals (WeightWatcher renamed it too)",
    "max_size": "max_evals (WeightWatcher renamed it too)",
    "ww2x": "pool=False (add the model with models.add(..., pool=False))",
    "glorot_fix": "not provided: the eigenvalues are not Glorot-rescaled",
    "conv2d_fft": "not provided (WeightWatcher deprecated it)",
    "fft": "not provided (experimental in WeightWatcher)",
    "stacked": "not provided (experimental in WeightWatcher)",
    "channels": "the layout comes from the framework; parameter_overrides= of models.add "
    "changes a slice's type",
    "svd_method": "our spectra are exact (LAPACK or Gram eigenvalues); option precision= "
    "chooses float32 or float64",
    "fit": "fields tpl_alpha / tpl_lambda (truncated power law) and expon_lambda "
    "(exponential) next to pl_alpha",
    "sparsify": "not provided: intra products are not sparsified (WeightWatcher's "
    "sparsify=False); add the model with models.add(..., intra=True)",
    "tolerance": "option weak_rank_tol of compute.apply (field weak_rank_loss)",
    "start_ids": "layer ids follow WeightWatcher's numbering of the stored model",
    "pl_package": "option fit_method='clauset' of compute.apply (the powerlaw package's scan)",
    "xmax": "option xmax of compute.apply",
    "xmin_max": "option xmin_max of compute.apply",
    "max_fingers": "option max_fingers of compute.apply",
    "finger_thresh": "option finger_thresh of compute.apply",
    "inverse": "not provided (the inverse ESD)",
    "conv2d_norm": "WeightWatcher's conv2d_norm is part of the convention (esd_scale='ww')",
}
#: the analyze() keywords that choose slices when the model is added (models.add options)
EXTRACTION_KEYWORDS = ("pool", "intra", "base_model", "peft")


def _hint(keyword: str) -> str:
    return f"analyze(): WeightWatcher's keyword {keyword}= is not taken here; {INSTEAD[keyword]}"


class WeightWatcher(Namespace):
    """WeightWatcher 0.7.7's one-call tables on this scope's models (one model at a time).

    ``session.weightwatcher.analyze()`` is ``WeightWatcher(model=m).analyze()`` for the
    model stored in the scope; ``get_summary()`` and ``describe()`` as WeightWatcher's.
    """

    def __init__(self, scope: Any) -> None:
        super().__init__(scope)
        self.details: Any = None

    def analyze(
        self,
        layers: Sequence[int | str] | int | str = (),
        min_evals: int | None = 8,
        max_evals: int | None = 15000,
        max_N: int | None = 50000,
        randomize: bool = False,
        mp_fit: bool = False,
        detX: bool = False,
        ERG: bool = False,
        fix_fingers: str | bool = False,
        vectors: bool = False,
        deltas: bool = False,
        peft: bool = False,
        base_model: Any = None,
        pool: bool = True,
        intra: bool = False,
        plot: bool = False,
        savefig: Any = "ww-img",
        **other: Any,
    ) -> Any:
        """WeightWatcher's ``analyze()`` details table of the scope's model.

        Args:
            layers: WeightWatcher layer ids (all > 0 keep them, all < 0 skip them) or layer
                names (its ``name`` or ``longname``, or our slice name); empty: all.
            min_evals: skip layers with fewer eigenvalues (M * rf); None: no limit.
            max_evals: skip layers with more eigenvalues; None: no limit.
            max_N: skip layers whose larger side N exceeds it; None: no limit.
            randomize: add the randomized-ESD columns (``max_rand_eval``, ``num_traps``...).
            mp_fit: add WeightWatcher's Marchenko-Pastur fit columns.
            detX: add the det X = 1 columns (``detX_num``, ``ERG_gap``...); ``ERG`` alias.
            ERG: the same as ``detX``.
            fix_fingers: False, ``"xmin_peak"`` or ``"clip_xmax"`` (adds ``num_fingers``,
                ``raw_alpha``).
            vectors: add the eigenvector localization columns.
            deltas: WeightWatcher only plots them: True is an error saying what to use.
            peft: analyze the LoRA adapter updates only: the model must be stored with
                ``models.add(model, lora_scaling="none")``.
            base_model: must be None here: store the model with ``models.add(model,
                base_model=...)`` (its slices are the differences).
            pool: False: one row per kernel position of each convolution; the model must be
                stored with ``models.add(model, pool=False)``.
            intra: True: the products X of consecutive layers; the model must be stored with
                ``models.add(model, intra=True)``. Rows, ids, names, types, N, M,
                matrix_rank and D are WeightWatcher's; the fitted values (and rank_loss) are
                ours (the ESD of X's squared singular values), where WeightWatcher fits the
                singular values themselves: its alpha is 2 alpha - 1 of ours, its sigma
                2 sigma, its xmin sqrt(xmin).
            plot: False only: figures come from ``session.viz`` (True says which).
            savefig: ignored unless set with ``plot`` (WeightWatcher saves plotted figures
                only); a folder with ``plot`` is an error saying what to use.
            **other: WeightWatcher's other keywords: an error saying what to use instead.

        Returns:
            A pandas DataFrame: WeightWatcher's columns (``layer_id``, ``name``, then the
            rest in its alphabetical order) and rows (by layer id). A layer whose power-law
            fit fails has WeightWatcher's row: ``status`` "failed", ``alpha`` -1.

        Raises:
            InvalidArgumentError: an unknown or WeightWatcher-only keyword (with what to use
                instead), a scope with no model or several, or a ``layers`` entry that
                names no layer.
        """
        import pandas as pd

        self._check_keywords(other, plot, savefig, deltas, base_model)
        detX = bool(detX or ERG)
        flags = {"randomize": randomize, "mp_fit": mp_fit, "detX": detX, "vectors": vectors}
        for key, value in [*flags.items(), ("peft", peft), ("pool", pool), ("intra", intra)]:
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"analyze(): {key} must be True or False, got {value!r}")
        if fix_fingers not in (False, None, "xmin_peak", "clip_xmax"):
            raise InvalidArgumentError(
                f"analyze(): fix_fingers must be False, 'xmin_peak' or 'clip_xmax', got {fix_fingers!r}"
            )
        model_id, slices = self._one_model()
        ids = layer_ids(slices)
        options: dict[str, Any] = {"min_evals": min_evals, "max_evals": max_evals, "max_N": max_N}
        if fix_fingers:
            options["fix_fingers"] = fix_fingers
        if peft:
            options["layer_selection"] = "peft"
        rows = [s for s in slices if _in_table(s, pool, intra)]
        rows = _select_layers(rows, ids, layers)
        columns = dict(COLUMNS)
        for key, on in [*flags.items(), ("fix_fingers", fix_fingers == "clip_xmax")]:
            if on:
                columns.update(OPTION_COLUMNS[key])
        fields = sorted({*columns.values(), "esd", "esd_ww_ratio"})
        values = self._compute(model_id, rows, fields, options)
        module = from_module(slices)
        # WeightWatcher's guards and layer selection leave out the slices without a spectrum
        kept = [s for s in sorted(rows, key=lambda s: (ids[s.name], s.index))
                if "esd_max" in values[s.uid]]  # fmt: skip
        records = [_row(s, ids, values[s.uid], columns, module) for s in kept]
        types = {s.name: _layer_type(s, module) for s in slices}
        for r, s in zip(records, kept, strict=True):
            if not pool:
                r.setdefault("slice_id", 0)  # WeightWatcher's id of an unsliced layer
            if peft:
                r["peft"] = True  # WeightWatcher's column of an adapter row
            if intra:  # a product is typed as its second layer, WeightWatcher's
                r["layer_type"] = types.get(s.meta["intra"][1], "dense")
        lead = ["layer_id", "name"]
        rest = sorted({c for r in records for c in r} - set(lead))
        details = pd.DataFrame.from_records(records, columns=[*lead, *rest])
        self.details = details
        return details

    def get_details(self) -> Any:
        """The table of the last :meth:`analyze` (WeightWatcher's ``get_details()``)."""
        return self.details

    def get_summary(self, details: Any = None) -> dict[str, float]:
        """WeightWatcher's ``get_summary()``: the mean of each summary column of the table.

        Args:
            details: a table from :meth:`analyze` (default: the last one).

        Returns:
            ``{"log_norm", "alpha", "alpha_weighted", "log_alpha_norm", "log_spectral_norm",
            "stable_rank"}`` (and ``"mp_softrank"`` after ``mp_fit=True``): their means,
            failed layers' -1 included as WeightWatcher does.

        Raises:
            InvalidArgumentError: no table yet.
        """
        if details is None:
            details = self.details
        if details is None:
            raise InvalidArgumentError("get_summary(): call analyze() first (or pass details=)")
        return {c: float(details[c].mean()) for c in SUMMARY_COLUMNS if c in details.columns}

    def describe(
        self,
        layers: Sequence[int | str] | int | str = (),
        min_evals: int | None = 8,
        max_evals: int | None = 15000,
        max_N: int | None = 50000,
        pool: bool = True,
        intra: bool = False,
        peft: bool = False,
        **other: Any,
    ) -> Any:
        """WeightWatcher's ``describe()``: the layers ``analyze()`` would analyze, with their
        shapes only (nothing spectral is computed).

        Args:
            layers: layer ids or names, as :meth:`analyze`.
            min_evals: skip layers with fewer eigenvalues (M * rf).
            max_evals: skip layers with more eigenvalues.
            max_N: skip layers whose larger side exceeds it.
            pool: False: the kernel positions of convolutions, as :meth:`analyze`.
            intra: True: the products of consecutive layers, as :meth:`analyze`.
            peft: True: the LoRA adapter updates only, as :meth:`analyze`.
            **other: WeightWatcher's other keywords: an error saying what to use instead.

        Returns:
            A DataFrame with WeightWatcher's describe() columns (``layer_id``, ``name``,
            ``M``, ``N``, ``Q``, ``layer_type``, ``longname``, ``num_evals``, ``rf``).

        Raises:
            InvalidArgumentError: as :meth:`analyze`.
        """
        import pandas as pd

        from diffract.kernels.spec import SliceNotApplicable
        from diffract.kernels.ww import spectrum_gate

        self._check_keywords(other, False, "ww-img", False, None)
        model_id, slices = self._one_model()
        ids = layer_ids(slices)
        rows = _select_layers([s for s in slices if _in_table(s, pool, intra)], ids, layers)
        selection = "peft" if peft else "weightwatcher"
        kept = []
        for s in rows:
            try:
                spectrum_gate(
                    np.broadcast_to(np.float32(0), s.shape),  # the gate reads the shape only
                    s,
                    min_evals=min_evals,
                    max_evals=max_evals,
                    max_N=max_N,
                    layer_selection=selection,
                )
            except SliceNotApplicable:
                continue
            kept.append(s)
        values = self._compute(
            model_id, kept, sorted(DESCRIBE_COLUMNS.values()), {}, precision=False
        )
        module = from_module(slices)
        records = []
        for s in sorted(kept, key=lambda s: (ids[s.name], s.index)):
            v = values[s.uid]
            rec: dict[str, Any] = {"layer_id": ids[s.name], "name": _name(s, module)}
            rec.update({c: v.get(f) for c, f in DESCRIBE_COLUMNS.items()})
            rec.update(layer_type=_layer_type(s, module), longname=_longname(s))
            records.append(rec)
        cols = ["layer_id", "name", "M", "N", "Q", "layer_type", "longname", "num_evals", "rf"]
        return pd.DataFrame.from_records(records, columns=cols)

    # -- helpers ---------------------------------------------------------------------

    def _check_keywords(
        self, other: dict[str, Any], plot: Any, savefig: Any, deltas: Any, base_model: Any
    ) -> None:
        for key in other:
            if key in INSTEAD:
                raise InvalidArgumentError(_hint(key))
        if other:
            known = ", ".join(sorted({*COLUMN_KEYWORDS, *INSTEAD}))
            raise InvalidArgumentError(
                f"analyze(): unknown keyword(s) {sorted(other)}; WeightWatcher's keywords "
                f"known here: {known}"
            )
        if plot:
            raise InvalidArgumentError(_hint("plot"))
        if deltas:
            raise InvalidArgumentError(_hint("deltas"))
        if savefig not in (False, None, "ww-img", ""):
            raise InvalidArgumentError(_hint("savefig"))
        if base_model is not None:
            raise InvalidArgumentError(
                "analyze(): base_model= is an option of models.add here: store the model "
                "with session.models.add(model, base_model=base) (its slices are W - W_base), "
                "then analyze it"
            )

    def _one_model(self) -> tuple[str, list[SliceInfo]]:
        scope = self._scope
        slices = scope.slices()
        models = list(dict.fromkeys(s.model_id for s in slices))
        if len(models) != 1:
            what = "no model" if not models else f"{len(models)} models ({models[:5]})"
            raise InvalidArgumentError(
                f"analyze() reads one model, as WeightWatcher; this scope holds {what}: "
                "add one with session.models.add(model) or choose one with "
                "session.filter(model_ids=...)"
            )
        return models[0], sorted(slices, key=lambda s: s.index)

    def _compute(
        self,
        model_id: str,
        rows: list[SliceInfo],
        fields: list[str],
        options: dict[str, Any],
        precision: bool = True,
    ) -> dict[str, dict[str, Any]]:
        """``fields`` of ``rows`` computed afresh in a private in-memory session (a failed or
        not applicable value is absent)."""
        import warnings

        from diffract.run.report import KernelFailureWarning
        from diffract.session.results import MissingValuesWarning

        values: dict[str, dict[str, Any]] = {s.uid: {} for s in rows}
        if not rows:
            return values
        session_type: Any = type(self._session)  # a Session (not imported: no cycle)
        with session_type(profile="ram", registry=self._session.registry) as tmp:
            tmp.utils.merge_other_session(self._scope, fields=[])
            scope = tmp.filter(model_ids=[model_id], param_ids=[s.uid for s in rows])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MissingValuesWarning)
                warnings.simplefilter("ignore", KernelFailureWarning)
                if precision:  # WeightWatcher's float64 spectra
                    options = {**options, "precision": "float64"}
                scope.compute.apply(*fields, progress=False, conventions="weightwatcher", **options)
            store = tmp.store
            for s in rows:
                for f in fields:
                    if store.has((s.uid, f)):
                        values[s.uid][f] = store.get((s.uid, f))
        return values


#: every keyword analyze() takes (for the unknown-keyword message)
COLUMN_KEYWORDS = (
    "layers",
    "min_evals",
    "max_evals",
    "max_N",
    "randomize",
    "mp_fit",
    "detX",
    "ERG",
    "fix_fingers",
    "vectors",
    "deltas",
    "peft",
    "base_model",
    "pool",
    "intra",
    "plot",
    "savefig",
)


def _longname(s: SliceInfo) -> str:
    """WeightWatcher's ``longname``: the module path (the slice name less ``.weight``); a
    kernel position's is its layer's, an intra product's its second layer's."""
    pos = s.meta.get("kernel_position")
    name = pos["of"] if pos else s.meta["intra"][1] if "intra" in s.meta else s.name
    for suffix in (".weight", ".kernel"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _name(s: SliceInfo, module: bool) -> str:
    """WeightWatcher's ``name``: a module's attribute name (PyTorch modules), or the whole
    path (state dicts, as its ``PyStateDictLayer``)."""
    longname = _longname(s)
    return longname.rsplit(".", 1)[-1] if module else longname


def _layer_type(s: SliceInfo, module: bool) -> str:
    """WeightWatcher's ``layer_type`` string of a slice: by module type, or for a state
    dict by the tensor's number of dimensions (an embedding reads "dense" there)."""
    if s.type == ParameterType.CONV:
        return "conv2d" if "kernel_position" in s.meta or len(s.shape) >= 4 else "conv1d"
    if s.type == ParameterType.EMBEDDING and module:
        return "embedding"
    return "dense"


def from_module(slices: Iterable[SliceInfo]) -> bool:
    """Whether the model was added as a PyTorch module (its slices carry WeightWatcher's
    layer ids), which WeightWatcher names and types by module, not by tensor."""
    plain = [s for s in slices if "kernel_position" not in s.meta and "intra" not in s.meta]
    return bool(plain) and all("ww_layer_id" in s.meta for s in plain)


def layer_ids(slices: Iterable[SliceInfo]) -> dict[str, int]:
    """WeightWatcher's ``layer_id`` of each slice name: for a PyTorch module, its module's
    position in ``named_modules()`` (slice meta ``"ww_layer_id"``, the root module is 0);
    else WeightWatcher's numbering of a state dict (1, 2, ... over the ``.weight`` tensors in
    the dict's order, slice meta ``"ww_state_dict_id"``; for a dict of arrays or a file, in
    name order; where no name ends in ``.weight``, over every slice). Kernel-position and
    intra slices take their layer's id."""
    slices = sorted(slices, key=lambda s: s.index)
    plain = [s for s in slices if "kernel_position" not in s.meta and "intra" not in s.meta]
    ids: dict[str, int] = {}
    if plain and all("ww_layer_id" in s.meta for s in plain):
        ids = {s.name: int(s.meta["ww_layer_id"]) for s in plain}
    elif any("ww_state_dict_id" in s.meta for s in plain):  # a PyTorch state dict, its order
        ids = {
            s.name: int(s.meta["ww_state_dict_id"]) for s in plain if "ww_state_dict_id" in s.meta
        }
        n = max(ids.values())
        for s in plain:
            if s.name not in ids:
                n += 1
                ids[s.name] = n
    else:
        counted = [s for s in plain if s.name.endswith(".weight")] or plain
        ids = {s.name: i for i, s in enumerate(counted, start=1)}
        n = len(counted)
        for s in plain:
            if s.name not in ids:
                n += 1
                ids[s.name] = n
    for s in slices:
        pos = s.meta.get("kernel_position")
        if pos:
            ids[s.name] = ids.get(pos["of"], 0)
        elif "intra" in s.meta:
            ids[s.name] = ids.get(s.meta["intra"][1], 0)
    return ids


def _in_table(s: SliceInfo, pool: bool, intra: bool) -> bool:
    """Whether a slice can be a row of analyze(pool=, intra=)."""
    if intra:
        return "intra" in s.meta
    if "intra" in s.meta:
        return False
    if pool:
        return "kernel_position" not in s.meta
    return "kernel_position" in s.meta or not (s.type == ParameterType.CONV and len(s.shape) >= 3)


def _select_layers(
    rows: list[SliceInfo], ids: dict[str, int], layers: Sequence[int | str] | int | str
) -> list[SliceInfo]:
    """WeightWatcher's ``layers=`` filter: ids (all > 0 keep, all < 0 skip) or names."""
    wanted: list[Any] = [layers] if isinstance(layers, (int, str)) else list(layers)
    if not wanted:
        return rows
    numbers = [int(x) for x in wanted if isinstance(x, int) and not isinstance(x, bool)]
    if len(numbers) == len(wanted):
        known = sorted({ids[s.name] for s in rows})
        if all(x >= 0 for x in numbers):
            unknown = [x for x in numbers if x not in known]
            if unknown:
                raise InvalidArgumentError(
                    f"analyze(): layers {unknown} are no layer ids of this model; its ids: {known}"
                )
            return [s for s in rows if ids[s.name] in numbers]
        if all(x < 0 for x in numbers):
            return [s for s in rows if -ids[s.name] not in numbers]
        raise InvalidArgumentError(
            "analyze(): layers= takes ids to keep (all > 0) or to skip (all < 0), not both"
        )
    if all(isinstance(x, str) for x in wanted):
        names = set(wanted)
        module = from_module(rows)
        kept = [s for s in rows if names & {s.name, _name(s, module), _longname(s)}]
        if not kept:
            raise InvalidArgumentError(
                f"analyze(): layers {sorted(names)} name no layer of this model; names are "
                "WeightWatcher's name or longname, or the slice name"
            )
        return kept
    raise InvalidArgumentError(
        f"analyze(): layers= takes integer layer ids or names, got {wanted!r}"
    )


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


#: WeightWatcher's columns that scale with the eigenvalues, the singular values, or are
#: log10 of them (with alpha log10 for the alpha-weighted ones)
_EIGEN = ("xmin", "xmax", "lambda_max", "spectral_norm", "norm")
_SVALS = ("sv_max", "sv_min")
_LOGS = ("log_norm", "log_spectral_norm")
_ALPHA_LOGS = ("alpha_weighted", "log_alpha_norm")
#: WeightWatcher's weak_rank_loss tolerance (its ``tolerance``) on its eigenvalues
_WEAK_RANK_TOL = 1e-6


def _position_scale(row: dict[str, Any], v: dict[str, Any], pos: dict[str, Any]) -> None:
    """A kernel-position row (``pool=False``) in WeightWatcher's scale: its conv2d_norm scales
    each position's matrix by sqrt(P / 2), P kernel positions (tests/kernels/test_extract_derived_ww.py);
    its ``rf`` is the layer's P, and ``weak_rank_loss`` counts the scaled eigenvalues."""
    c = pos["count"] / 2
    alpha = v.get("pl_alpha", -1.0)
    for col in _EIGEN:
        if isinstance(row.get(col), float):
            row[col] *= c
    for col in _SVALS:
        row[col] *= math.sqrt(c)
    for col in _LOGS:
        row[col] += math.log10(c)
    for col in _ALPHA_LOGS:
        row[col] += alpha * math.log10(c)
    row["rf"] = int(pos["count"])
    lam = np.asarray(v["esd"], dtype=np.float64) * float(v.get("esd_ww_ratio", 1.0)) * c
    row["weak_rank_loss"] = int(np.count_nonzero(lam < _WEAK_RANK_TOL))


def _row(
    s: SliceInfo,
    ids: dict[str, int],
    v: dict[str, Any],
    columns: dict[str, str],
    module: bool,
) -> dict[str, Any]:
    """One details row in WeightWatcher's terms (its failed-fit values where the fit failed)."""
    row: dict[str, Any] = {
        "layer_id": ids[s.name],
        "name": _name(s, module),
        "longname": _longname(s),
    }
    if "intra" in s.meta:
        a, b = s.meta["intra"]
        row["name"] = f"{ids.get(a, 0)} X {ids.get(b, 0)} "  # WeightWatcher's, its space too
        row["Xflag"] = True
    pos = s.meta.get("kernel_position")
    if pos:
        row["slice_id"] = int(pos["index"])
    row.update(layer_type=_layer_type(s, module), has_esd=True, status="success")
    for col, f in columns.items():
        row[col] = _plain(v.get(f, math.nan))
    if len(s.shape) >= 4 and s.type == ParameterType.CONV:
        for col in _SVALS:
            row[col] = row[col] * math.sqrt(0.5)  # WeightWatcher's conv2d_norm
    failed = "pl_alpha" not in v
    if failed:  # the power-law fit failed: WeightWatcher's row for that
        lam = np.asarray(v["esd"], dtype=np.float64) * float(v.get("esd_ww_ratio", 1.0))
        lam = lam[lam > 0]
        row.update(status="failed", alpha=-1.0, D=-1.0, sigma=-1.0, xmin=-1.0, xmax=None)
        row.update(num_pl_spikes=-1, warning="over-trained")
        row["alpha_weighted"] = -math.log10(float(v["esd_max"]))
        row["log_alpha_norm"] = math.log10(float(np.sum(lam**-1.0)))
        if "raw_alpha" in columns:
            row.update(raw_alpha=-1.0, num_fingers=0)
    if pos:
        _position_scale(row, v, pos)
        if failed:
            row["xmin"] = -1.0
    return row
