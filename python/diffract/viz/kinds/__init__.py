"""One module per figure kind of :mod:`diffract.viz`: each builds a spec (plain dicts of
traces and layout, Plotly's figure format) from a scope's stored fields.

A kind is listed, with what it needs, in :mod:`diffract.viz.registry`; panels, the report,
``session.viz`` and the server's figure route find it there.
"""
