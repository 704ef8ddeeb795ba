"""Diffract's ``diffract.core`` import paths that its documentation uses (compute enums, errors).

Only the public names Diffract's docs import live here; its storage managers and containers
are internals and are not provided (see ``docs/migrating-from-diffract.md``).
"""
