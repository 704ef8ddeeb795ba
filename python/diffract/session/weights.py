"""Reading a slice's weights: from the store, or from the checkpoint file it references."""

from __future__ import annotations

import numpy as np

from diffract._core.slices import SliceInfo
from diffract.extract.references import ReferenceReader
from diffract.store import Store


def read_weights(store: Store, references: ReferenceReader, s: SliceInfo) -> np.ndarray:
    """The weights of slice ``s``: from the store, or from the checkpoint it references.

    Raises:
        StoreError: a referenced checkpoint is gone or changed since the model was added.
    """
    if s.meta.get("external"):
        return references.read(s)
    stored: np.ndarray = store.weights(s.uid)
    return stored
