"""Equinox-style pytree filtering: ``filter``, ``partition``, ``combine``, ``is_array``.

Semantics follow ``equinox.filter`` / ``partition`` / ``combine``: ``filter_spec`` is a prefix
tree of the pytree whose leaves are ``bool`` (keep or drop the whole subtree) or a predicate
(mapped over the subtree's leaves); dropped leaves become ``replace`` (default ``None``).

When JAX is already imported, JAX's own pytree registry is used, so every registered pytree
(Equinox modules, Flax structures, custom nodes) works. Otherwise a small built-in registry
covers dict, OrderedDict, defaultdict, list, tuple, namedtuple and None with the same rules
as JAX (dict keys sorted, None an empty subtree), so ``import diffract`` never imports JAX.
"""

from __future__ import annotations

import sys
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from diffract._vocab.dtypes import NON_NUMPY_FLOATS

Leaf = Any
IsLeaf = Callable[[Any], bool] | None

_FILTER_SPEC_ERROR = (
    "`filter_spec` must consist of booleans and callables only (a prefix tree of the pytree "
    "whose leaves are True, False or a predicate Leaf -> bool); got a leaf of type {kind}"
)


# --------------------------------------------------------------------------------------
# leaf predicates
# --------------------------------------------------------------------------------------


def _jax_array_type() -> type | None:
    jax = sys.modules.get("jax")
    return getattr(jax, "Array", None) if jax is not None else None


def _torch_tensor_type() -> type | None:
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def is_array(element: Any) -> bool:
    """True for a NumPy or JAX array (as ``equinox.is_array``), and also for a PyTorch tensor
    or a lazily loaded tensor from a checkpoint file (diffract's ``LazyArray``).

    Args:
        element: any pytree leaf.

    Returns:
        Whether ``element`` is an array. Frameworks the user has not imported are not checked
        (and not imported).
    """
    np = sys.modules.get("numpy")  # not imported yet: nothing can be a NumPy array
    if np is not None and isinstance(element, (np.ndarray, np.generic)):
        return True
    from diffract._vocab.arrays import LazyArray

    if isinstance(element, LazyArray):
        return True
    for kind in (_jax_array_type(), _torch_tensor_type()):
        if kind is not None and isinstance(element, kind):
            return True
    return False


def _dtype_name(element: Any) -> str | None:
    dtype = getattr(element, "dtype", None)
    return None if dtype is None else str(dtype).replace("torch.", "")


def is_inexact_array(element: Any) -> bool:
    """True for an array (see :func:`is_array`) of a floating or complex dtype
    (bf16, fp16 and fp8 included).

    Args:
        element: any pytree leaf.

    Returns:
        Whether ``element`` is an array with an inexact dtype.
    """
    if not is_array(element):
        return False
    name = _dtype_name(element)
    if name in NON_NUMPY_FLOATS:
        return True
    import numpy as np

    try:
        return bool(np.issubdtype(np.dtype(name), np.inexact))
    except TypeError:
        return name is not None and (name.startswith("float") or name.startswith("complex"))


# --------------------------------------------------------------------------------------
# the pytree backend (JAX's when JAX is loaded, else a built-in one with the same rules)
# --------------------------------------------------------------------------------------


def _use_jax() -> bool:
    return "jax" in sys.modules


def _node(tree: Any) -> tuple[Sequence[Any], list[Any], Callable[[Any], Any]] | None:
    """(keys, children, rebuild) for a built-in container node, or None for a leaf."""
    if tree is None:
        return (), [], lambda _children: None
    if isinstance(tree, (OrderedDict, defaultdict)):
        keys = list(tree.keys())
        if isinstance(tree, defaultdict):
            factory = tree.default_factory

            def rebuild_dd(
                ch: list[Any], keys: list[Any] = keys, factory: Any = factory
            ) -> defaultdict[Any, Any]:
                return defaultdict(factory, zip(keys, ch, strict=True))

            return [("dict", k) for k in keys], [tree[k] for k in keys], rebuild_dd
        kind: type[Any] = type(tree)
        return (
            [("dict", k) for k in keys],
            [tree[k] for k in keys],
            lambda ch, keys=keys, kind=kind: kind(zip(keys, ch, strict=True)),
        )
    if type(tree) is dict:
        keys = sorted(tree.keys())
        return (
            [("dict", k) for k in keys],
            [tree[k] for k in keys],
            lambda ch, keys=keys: dict(zip(keys, ch, strict=True)),
        )
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        fields = tree._fields
        kind = type(tree)
        return (
            [("attr", f) for f in fields],
            list(tree),
            lambda ch, kind=kind: kind(*ch),
        )
    if type(tree) is tuple:
        return [("seq", i) for i in range(len(tree))], list(tree), tuple
    if type(tree) is list:
        return [("seq", i) for i in range(len(tree))], list(tree), list
    return None


def _builtin_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None) -> Any:
    def rec(t: Any, rs: tuple[Any, ...]) -> Any:
        if is_leaf is not None and is_leaf(t):
            return f(t, *rs)
        node = _node(t)
        if node is None:
            return f(t, *rs)
        keys, children, rebuild = node
        rest_children = []
        for r in rs:
            rnode = _node(r)
            if rnode is None or type(r) is not type(t) or rnode[0] != keys:
                raise ValueError(
                    f"pytree structures differ: expected a {type(t).__name__} node with keys "
                    f"{[k for _, k in keys]}, got {type(r).__name__}: {r!r:.80}"
                )
            rest_children.append(rnode[1])
        return rebuild(
            [rec(c, tuple(rc[i] for rc in rest_children)) for i, c in enumerate(children)]
        )

    return rec(tree, rest)


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None) -> Any:
    """``jax.tree_util.tree_map`` semantics (``rest`` may have ``tree`` as a prefix)."""
    if _use_jax():
        import jax.tree_util as jtu

        return jtu.tree_map(f, tree, *rest, is_leaf=is_leaf)
    return _builtin_map(f, tree, *rest, is_leaf=is_leaf)


def _key_to_str(entry: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry).strip(".[]'\"")


def tree_leaves_with_path(tree: Any, is_leaf: IsLeaf = None) -> list[tuple[tuple[str, ...], Any]]:
    """Every leaf with its key path as a tuple of strings (dict keys, indices, attribute
    names), in the pytree's flattening order. ``None`` leaves are empty subtrees (skipped)."""
    if _use_jax():
        import jax.tree_util as jtu

        pairs, _ = jtu.tree_flatten_with_path(tree, is_leaf=is_leaf)
        return [(tuple(_key_to_str(k) for k in path), leaf) for path, leaf in pairs]
    out: list[tuple[tuple[str, ...], Any]] = []

    def rec(t: Any, path: tuple[str, ...]) -> None:
        if is_leaf is not None and is_leaf(t):
            out.append((path, t))
            return
        node = _node(t)
        if node is None:
            out.append((path, t))
            return
        keys, children, _ = node
        for (_, k), c in zip(keys, children, strict=True):
            rec(c, (*path, str(k)))

    rec(tree, ())
    return out


# --------------------------------------------------------------------------------------
# filter / partition / combine
# --------------------------------------------------------------------------------------


def _make_filter_tree(is_leaf: IsLeaf) -> Callable[[Any, Any], Any]:
    def _filter_tree(mask: Any, arg: Any) -> Any:
        np = sys.modules.get("numpy")
        if isinstance(mask, bool) or (np is not None and isinstance(mask, np.bool_)):
            return tree_map(lambda _: bool(mask), arg, is_leaf=is_leaf)
        if callable(mask):
            return tree_map(mask, arg, is_leaf=is_leaf)
        raise ValueError(_FILTER_SPEC_ERROR.format(kind=type(mask).__name__))

    return _filter_tree


def filter(  # mirrors equinox.filter
    pytree: Any,
    filter_spec: Any,
    inverse: bool = False,
    replace: Any = None,
    is_leaf: IsLeaf = None,
) -> Any:
    """Keep the leaves of ``pytree`` that satisfy ``filter_spec``; replace the rest.

    As ``equinox.filter``.

    Args:
        pytree: any pytree.
        filter_spec: a prefix tree of ``pytree`` whose leaves are ``bool`` (keep or drop the
            whole subtree) or a predicate ``leaf -> bool`` (mapped over the subtree's leaves).
        inverse: keep the leaves for which ``filter_spec`` is falsey instead.
        replace: what dropped leaves become.
        is_leaf: treat the nodes it is true for as leaves.

    Returns:
        A pytree of the same structure, with ``replace`` where a leaf was dropped.

    Raises:
        ValueError: ``filter_spec`` holds something other than booleans and callables, or is
            not a prefix of ``pytree``.
    """
    inverse = bool(inverse)
    filter_tree = tree_map(_make_filter_tree(is_leaf), filter_spec, pytree)
    return tree_map(lambda mask, x: x if bool(mask) != inverse else replace, filter_tree, pytree)


def partition(
    pytree: Any,
    filter_spec: Any,
    replace: Any = None,
    is_leaf: IsLeaf = None,
) -> tuple[Any, Any]:
    """Split ``pytree`` into (kept, rest), each with ``replace`` in the other's places.

    ``combine(kept, rest)`` gives ``pytree`` back. As ``equinox.partition``.

    Args:
        pytree: any pytree.
        filter_spec: a prefix tree of booleans and predicates, as for :func:`filter`.
        replace: what fills the holes in each half.
        is_leaf: treat the nodes it is true for as leaves.

    Returns:
        ``(kept, rest)``: the leaves ``filter_spec`` selects, and the others.

    Raises:
        ValueError: ``filter_spec`` holds something other than booleans and callables, or is
            not a prefix of ``pytree``.
    """
    filter_tree = tree_map(_make_filter_tree(is_leaf), filter_spec, pytree)
    left = tree_map(lambda mask, x: x if mask else replace, filter_tree, pytree)
    right = tree_map(lambda mask, x: replace if mask else x, filter_tree, pytree)
    return left, right


def _first_not_none(*args: Any) -> Any:
    for arg in args:
        if arg is not None:
            return arg
    return None


def combine(*pytrees: Any, is_leaf: IsLeaf = None) -> Any:
    """Merge pytrees of the same structure, taking at each leaf the first non-None value.

    Undoes :func:`partition`. As ``equinox.combine``.

    Args:
        *pytrees: pytrees of one structure, with ``None`` in the places they leave to the others.
        is_leaf: treat the nodes it is true for as leaves (``None`` always is one).

    Returns:
        The merged pytree.

    Raises:
        TypeError: no pytree was given.
        ValueError: the pytrees' structures differ.
    """
    if not pytrees:
        raise TypeError("combine() needs at least one pytree")

    def _is_leaf(x: Any) -> bool:
        return x is None or (is_leaf is not None and is_leaf(x))

    return tree_map(_first_not_none, *pytrees, is_leaf=_is_leaf)


def dotted_name(path: tuple[Hashable, ...]) -> str:
    """Join a key path into a dotted name (``("encoder", "layer", "0", "weight")`` ->
    ``"encoder.layer.0.weight"``)."""
    return ".".join(str(p) for p in path)
