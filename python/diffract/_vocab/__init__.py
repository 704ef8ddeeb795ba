"""Shared vocabulary with no I/O: slice identity, owner keys, pytree filters, JSON values,
array helpers, configuration and the widget wire types. Every other layer imports from here;
nothing here imports another layer."""
