"""Filters as data: :class:`Filter` and :class:`FilterChain` (public path ``diffract.filters``).

The implementation lives in :mod:`diffract._vocab.filters`; this module is its public face.
"""

from diffract._vocab.filters import Filter as Filter, FilterChain as FilterChain

__all__ = ["Filter", "FilterChain"]
