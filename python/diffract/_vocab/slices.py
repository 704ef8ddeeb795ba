"""Slice identity: ``ParameterType``, ``SliceInfo``, model_id rules and stable uids."""

from __future__ import annotations

import enum
import hashlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from diffract._errors import RESERVED_MODEL_ID_CHARS, InvalidIdentifierError, InvalidModelIdError
from diffract._vocab.dtypes import itemsize

_TYPE_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")


class ParameterType(enum.IntFlag, boundary=enum.KEEP):
    """The kind of a weight slice: built-in (dense, embedding, conv, norm, bias, other,
    recurrent, and ``UNKNOWN``) or custom (``ParameterType.from_string("attention")``).

    An ``enum.IntFlag``, as Diffract's: ``UNKNOWN`` is 0, ``DENSE`` 1, the others the next
    bits; a custom type gets the next free bit when it is first named (in this process:
    the bits are never stored, the names are). Members are unique:
    ``ParameterType.from_string("dense") is ParameterType.DENSE``, and
    ``ParameterType("dense")`` is the same. ``value`` is the lower-case name (``"dense"``),
    what stores and filters keep; ``int(t)`` is the bit. A type compares equal to its name,
    so filters accept either form.

    Attributes:
        value: the lower-case name (``"dense"``).
        name: the upper-case name (``"DENSE"``).
    """

    UNKNOWN = 0
    DENSE = 1
    EMBEDDING = 2
    CONV = 4
    NORM = 8
    BIAS = 16
    OTHER = 32
    #: the input, hidden and projection matrices of an RNN, LSTM or GRU (analyzed like dense
    #: matrices; WeightWatcher's layer selection leaves them out, as WeightWatcher does)
    RECURRENT = 64

    @classmethod
    def from_string(cls, value: str | ParameterType) -> ParameterType:
        """The type named ``value`` (any case); a name not known yet makes a custom type.

        Args:
            value: a type name (letters, digits, ``_`` or ``-``), or a type.

        Returns:
            The member.

        Raises:
            TypeError: ``value`` is neither a string nor a ParameterType.
            ValueError: the name has characters other than those allowed.
        """
        if isinstance(value, ParameterType):
            return value
        if not isinstance(value, str):
            raise TypeError(
                f"ParameterType.from_string expects a string, got {type(value).__name__}: {value!r}"
            )
        key = value.strip().lower()
        found = cls._member_map_.get(key.upper())
        if found is not None:
            return found  # type: ignore[return-value]
        if not _TYPE_NAME.match(key):
            raise ValueError(
                f"invalid parameter type name {value!r}: use lower-case letters, digits, '_' or '-'"
            )
        with _TYPE_LOCK:
            found = cls._member_map_.get(key.upper())
            if found is None:
                bit = 1 << max(int(m._value_) for m in cls._member_map_.values()).bit_length()
                found = int.__new__(cls, bit)
                found._name_ = key.upper()
                found._value_ = bit
                found._sort_order_ = len(cls._member_names_)  # type: ignore[attr-defined]
                cls._member_map_[key.upper()] = found
                cls._value2member_map_[bit] = found
                cls._member_names_.append(key.upper())
        return found  # type: ignore[return-value]

    @classmethod
    def _missing_(cls, value: object) -> Any:
        """``ParameterType("dense")``: a name is looked up (or made) as by from_string."""
        if isinstance(value, str):
            return cls.from_string(value)
        return super()._missing_(value)

    @classmethod
    def builtin(cls) -> tuple[ParameterType, ...]:
        """The built-in types detected by the extractors, in a fixed order.

        Returns:
            DENSE, EMBEDDING, CONV, NORM, BIAS, OTHER, RECURRENT.
        """
        return (cls.DENSE, cls.EMBEDDING, cls.CONV, cls.NORM, cls.BIAS, cls.OTHER, cls.RECURRENT)

    @classmethod
    def known(cls) -> tuple[ParameterType, ...]:
        """Every type named so far in this process (built-in first, then UNKNOWN).

        Returns:
            The built-in types, UNKNOWN, then the custom ones in creation order.
        """
        builtin = cls.builtin()
        others = [t for t in cls.__members__.values() if t not in builtin]
        return builtin + tuple(others)

    @property
    def value(self) -> str:  # type: ignore[override]
        """The lower-case name (``"dense"``): what stores, exports and filters keep."""
        return (self._name_ or "").lower()

    @property
    def is_custom(self) -> bool:
        """True for a type made with :meth:`from_string` that is not built in."""
        return self is not ParameterType.UNKNOWN and self not in self.builtin()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.value == other.strip().lower()
        return int.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        if self.is_custom and self._name_ is not None and "|" not in self._name_:
            return f"ParameterType.from_string({self.value!r})"
        return f"ParameterType.{self._name_}"

    def __str__(self) -> str:
        return self.value

    def __reduce_ex__(self, protocol: Any) -> tuple[type[ParameterType], tuple[str]]:
        # by name (bits of custom types differ between processes); the class pickles by
        # reference, also with cloudpickle (a process pool, Dask)
        return (ParameterType, (self.value,))


_TYPE_LOCK = threading.Lock()


#: the prefix that makes a filter entry a regular expression (``filter(model_ids=["re:a.*"])``,
#: :data:`diffract._vocab.filters.REGEX_PREFIX`): a new model id may not start with it, or a
#: filter naming that id would select the models its pattern matches instead
FILTER_REGEX_PREFIX = "re:"


def validate_model_id(model_id: object) -> str:
    """Return ``model_id`` if it is a valid id for a new model, else raise naming the problem.

    Called where an id is created (``models.add``, ``rename``, ``session.track``), never on
    the ids a store already holds: a store written before a rule was added stays readable.

    Raises:
        InvalidModelIdError: not a string, empty, a reserved character (``@ [ ] , /``), a
            control character or lone surrogate, or the filters' regex prefix ``re:``.
    """
    if not isinstance(model_id, str):
        raise InvalidModelIdError(
            f"model_id must be a string, got {type(model_id).__name__}: {model_id!r}"
        )
    if not model_id.strip():
        raise InvalidModelIdError("model_id must be a non-empty string (got an empty one)")
    for ch in RESERVED_MODEL_ID_CHARS:
        if ch in model_id:
            raise InvalidModelIdError(
                f"model_id {model_id!r} contains the reserved character {ch!r}; "
                f"the characters {' '.join(RESERVED_MODEL_ID_CHARS)} may not appear in a model_id "
                "(use '-', '_' or '.' instead)"
            )
    if model_id.startswith(FILTER_REGEX_PREFIX):
        raise InvalidModelIdError(
            f"model_id {model_id!r} starts with {FILTER_REGEX_PREFIX!r}, which filters read as a "
            f"regular expression (filter(model_ids=[{model_id!r}]) would select every id it "
            "matches); a model_id may not start with 're:' (e.g. drop the prefix or use 're-')"
        )
    if any(ord(c) < 32 for c in model_id):
        raise InvalidModelIdError(f"model_id {model_id!r} contains a control character")
    if _lone_surrogate(model_id):
        raise InvalidModelIdError(
            f"model_id {model_id!r} contains a lone surrogate (not a Unicode character: it "
            "cannot be stored as UTF-8)"
        )
    return model_id


def _lone_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def make_uid(model_id: str, name: str) -> str:
    """Stable uid of a slice: the first 16 hex digits of BLAKE2b(model_id NUL name).

    Args:
        model_id: the model's id.
        name: the parameter's dotted name.

    Returns:
        The uid.

    Raises:
        InvalidIdentifierError: the id or the name holds a lone surrogate (no UTF-8 form).
    """
    for what, text in (("model_id", model_id), ("parameter name", name)):
        if _lone_surrogate(text):
            raise InvalidIdentifierError(
                f"{what} {text!r} contains a lone surrogate (not a Unicode character: it "
                "cannot be stored as UTF-8); rename it"
            )
    digest = hashlib.blake2b(f"{model_id}\x00{name}".encode(), digest_size=8)
    return digest.hexdigest()


@dataclass(frozen=True)
class SliceInfo:
    """Identity and shape of one stored weight slice (no array data).

    Attributes:
        model_id: the model the slice belongs to.
        name: its dotted parameter name (``encoder.layer.0.weight``).
        uid: stable id derived from ``model_id`` and ``name``.
        type: its :class:`ParameterType`.
        shape: its shape.
        dtype: its dtype name as stored (``float32``, ``bfloat16``...).
        index: its position in the model.
        meta: extra facts from extraction (``layout`` ...); not part of equality.
    """

    model_id: str
    name: str
    uid: str
    type: ParameterType
    shape: tuple[int, ...]
    dtype: str
    index: int = 0
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def nbytes(self) -> int:
        """Size of the slice once converted to float32 for the math (at least its stored size)."""
        n = 1
        for d in self.shape:
            n *= int(d)
        size = max(4, itemsize(self.dtype))
        return n * size

    @property
    def layout(self) -> str:
        """``"out_in"`` (PyTorch: dense (out, in), conv (out, in, *kernel)) or ``"in_out"``
        (Flax/Keras ``kernel``: dense (in, out), conv (*kernel, in, out))."""
        layout: str = self.meta.get("layout", "out_in")
        return layout

    @property
    def effective_ndim(self) -> int:
        """ndim used to decide which kernels apply: the number of non-singleton axes for
        bias and norm slices (an Equinox conv bias of shape (C, 1, 1) is a vector), else ndim."""
        if self.type in (ParameterType.BIAS, ParameterType.NORM):
            return sum(1 for d in self.shape if d != 1) or 1
        return len(self.shape)

    def to_row(self) -> dict[str, Any]:
        """The slice as a table row.

        Returns:
            ``{"model_id", "name", "uid", "type", "shape", "dtype"}`` with JSON-ready values.
        """
        return {
            "model_id": self.model_id,
            "name": self.name,
            "uid": self.uid,
            "type": self.type.value,
            "shape": list(self.shape),
            "dtype": self.dtype,
        }


# --- type inference from names and shapes (used when no module class is known) ----------

_NORM_WORDS = re.compile(
    r"(^|[._/])(ln|ln_\w+|\w*norm\w*|bn\d*|layer_?norm|rms_?norm|scale)([._/]|$)", re.I
)
_EMBED_WORDS = re.compile(r"(embed|(^|[._/])(emb|wte|wpe|tok_emb|pos_emb|lookup)([._/]|$))", re.I)
_BIAS_WORDS = re.compile(r"(^|[._/])bias$", re.I)
_CONV_WORDS = re.compile(r"(^|[._/])conv", re.I)
#: PyTorch's RNN/LSTM/GRU (and cell) parameter names: ``weight_ih_l0``, ``weight_hh_l1_reverse``,
#: ``weight_hr_l0`` (LSTM projection), ``bias_ih_l0``; cells drop the ``_l<k>`` part
_RECURRENT_LEAF = re.compile(r"(^|[._/])(weight|bias)_(ih|hh|hr)(_l\d+)?(_reverse)?$")
#: Flax Linen's automatic names of its recurrent cells (``OptimizedLSTMCell_0``, ``GRUCell_1``)
#: and ``nn.RNN``'s ``cell`` under an ``RNN_<k>`` or ``Bidirectional_<k>`` scope
_LINEN_RECURRENT = re.compile(
    r"(^|[._/])((Optimized)?LSTMCell|GRUCell|MGUCell|SimpleCell|ConvLSTMCell)_\d+[._/]"
    r"|(^|[._/])(RNN|Bidirectional)_\d+[._/](\w+[._/])*cell[._/]"
)


def recurrent_name_type(name: str) -> ParameterType | None:
    """RECURRENT for a recurrent weight named as PyTorch or Flax Linen names them, BIAS for a
    PyTorch RNN bias (``bias_ih_l0``), else None.

    Args:
        name: the dotted parameter name.

    Returns:
        The type, or None when the name is not a recurrent layer's.
    """
    leaf = _RECURRENT_LEAF.search(name)
    if leaf is not None:
        return ParameterType.BIAS if leaf.group(2) == "bias" else ParameterType.RECURRENT
    if _LINEN_RECURRENT.search(name):
        if _BIAS_WORDS.search(name):
            return ParameterType.BIAS
        return ParameterType.RECURRENT
    return None


def infer_type(name: str, shape: tuple[int, ...]) -> ParameterType:
    """Documented name/shape rules, applied in this order:

    0. a recurrent weight's name (PyTorch's ``weight_ih_l0``/``weight_hh_l0[_reverse]``/
       ``weight_hr_l0``, a Flax Linen cell's ``LSTMCell_0.*``) -> RECURRENT, its
       ``bias_ih_l0``/``bias_hh_l0`` -> BIAS;
    1. a name ending in ``bias`` -> BIAS;
    2. a name with ``norm``/``ln``/``bn``/``scale`` components -> NORM;
    3. a name containing ``embed``, or with an ``emb``/``wte``/``wpe`` component -> EMBEDDING;
    4. ndim >= 3, or a name component starting with ``conv`` -> CONV;
    5. ndim == 2 -> DENSE; otherwise OTHER.
    """
    recurrent = recurrent_name_type(name)
    if recurrent is not None and (recurrent is ParameterType.BIAS or len(shape) >= 2):
        return recurrent
    if _BIAS_WORDS.search(name):
        return ParameterType.BIAS
    if _NORM_WORDS.search(name):
        return ParameterType.NORM
    if _EMBED_WORDS.search(name):
        return ParameterType.EMBEDDING
    if len(shape) >= 3 or (_CONV_WORDS.search(name) and len(shape) >= 2):
        return ParameterType.CONV
    if len(shape) == 2:
        return ParameterType.DENSE
    return ParameterType.OTHER
