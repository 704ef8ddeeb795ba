"""Where models live: a Session, a store or a plain dict ``{model_id: {name: array}}``;
reading their weights and adding models to them through the checks of ``session.models.add``."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from diffract.sampling.base import SamplingError


class LazyWeights(Mapping):
    """``{name: ndarray}`` of one stored model, read on first access."""

    def __init__(self, models: ModelSource, model_id: str, names: Sequence[str]) -> None:
        self._models, self._model_id, self._names = models, model_id, list(names)
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self._models.array(self._model_id, name)
        return self._cache[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class ModelSource:
    """One interface over a session, a store, or a ``{model_id: {name: array}}`` dict."""

    def __init__(self, target: Any) -> None:
        self.target = target
        if isinstance(target, MutableMapping):
            self.kind = "dict"
        elif hasattr(target, "models") and hasattr(getattr(target, "models", None), "add"):
            self.kind = "session"
        elif hasattr(target, "slices") and hasattr(target, "weights") and hasattr(target, "commit"):
            self.kind = "store"
        else:
            raise TypeError(
                "expected a diffract Session, a Store, or a dict {model_id: {name: ndarray}}; "
                f"got {type(target).__name__}"
            )

    @property
    def store(self) -> Any:
        if self.kind == "store":
            return self.target
        if self.kind == "session":
            return getattr(self.target, "store", None)
        return None

    def _slices(self, model_id: str) -> dict[str, Any]:
        store = self.store
        if store is not None:
            found = store.slices(model_id)
        else:  # a session without a public store: go through its model view
            found = [s for s in self.target.models.slices() if s.model_id == model_id]
        if not found:
            raise SamplingError(f"model {model_id!r} has no stored slices")
        return {s.name: s for s in found}

    def shapes(self, model_id: str) -> dict[str, tuple[int, ...]]:
        if self.kind == "dict":
            if model_id not in self.target:
                raise SamplingError(f"no model {model_id!r}; models: {sorted(self.target)}")
            return {n: tuple(getattr(a, "shape", ())) for n, a in self.target[model_id].items()}
        return {n: tuple(s.shape) for n, s in self._slices(model_id).items()}

    def weights(self, model_id: str) -> Mapping[str, Any]:
        if self.kind == "dict":
            return self.target[model_id]
        return LazyWeights(self, model_id, list(self._slices(model_id)))

    def array(self, model_id: str, name: str) -> Any:
        info = self._slices(model_id)[name]
        if self.kind == "session":  # resolves checkpoint-referenced weights too
            return self.target.models.weights(info.uid)
        return self.target.weights(info.uid)

    def has(self, model_id: str) -> bool:
        if self.kind == "dict":
            return model_id in self.target
        store = self.store
        if store is not None:
            return store.has_model(model_id)
        return any(s.model_id == model_id for s in self.target.models.slices())

    def add(
        self, model_id: str, weights: dict[str, Any], *, replace: bool, meta: dict[str, Any]
    ) -> None:
        if self.kind == "dict":
            self.target[model_id] = weights
        elif self.kind == "session":
            self.target.models.add(weights, model_id=model_id, replace=replace, meta=meta)
        else:
            store_add(self.target, model_id, weights, meta, replace=replace)


def store_add(
    store: Any,
    model_id: str,
    weights: Mapping[str, Any],
    meta: dict[str, Any],
    *,
    replace: bool = False,
) -> None:
    """Add a ``{name: ndarray}`` model to a bare store (no session needed).

    It goes through :func:`diffract.session.models.add_model`, the path of
    ``session.models.add``: the same model-id, duplicate and meta checks apply, and the
    model's info has the same shape (``meta`` under ``"meta"``).
    """
    from diffract.session.models import add_model

    add_model(store, dict(weights), model_id, replace=replace, meta=meta)
