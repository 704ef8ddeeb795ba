"""Point 13: apply() with no names, with an unknown name, with a kernel name."""

from dd_setup import TWO_MODELS

SNIPPETS = [
    {
        "id": "p13.apply_no_names",
        "what": "compute.apply() with no names: raises, or warns with an empty summary",
        "code": TWO_MODELS
        + """
r = warned(session.compute.apply)
v = r["value"]
s = getattr(v, "summary", v)
out["result"] = v if isinstance(v, dict) else [list(getattr(s, f, ())) for f in ("parameter_fields", "in_model_fields", "cross_model_fields")]
out["warned"] = r["warned"]
""",
    },
    {
        "id": "p13.apply_unknown",
        "what": 'compute.apply("x")',
        "code": TWO_MODELS + 'out["apply"] = catch(session.compute.apply, "x", names=("x",))\n',
    },
    {
        "id": "p13.apply_list_of_unknown",
        "what": 'compute.apply(["x"]) (a list, as in the issue)',
        "code": TWO_MODELS + 'out["apply"] = catch(session.compute.apply, ["x"])\n',
    },
    {
        "id": "p13.apply_list_of_known",
        "what": 'compute.apply(["frob_norm"]) (a list of a known name)',
        "code": TWO_MODELS
        + 'out["apply"] = catch(lambda: (session.compute.apply(["frob_norm"]), "ok")[1])\n',
    },
    {
        "id": "p13.apply_known_and_unknown",
        "what": 'compute.apply("frob_norm", "x"): raises before any work?',
        "code": TWO_MODELS
        + """
out["apply"] = catch(session.compute.apply, "frob_norm", "x")
d = session.results.export_metrics("frob_norm", export_format="dict")
out["written"] = sum(1 for e in d.values() if e["fields"])
""",
    },
    {
        "id": "p13.apply_kernel_name",
        "what": 'compute.apply("weights_svd") (a kernel name that is not a field)',
        "code": TWO_MODELS
        + 'out["apply"] = catch(lambda: (session.compute.apply("weights_svd"), "ok")[1])\n',
    },
    {
        "id": "p13.apply_typo_hint",
        "what": 'compute.apply("frob_norn"): error names the close match',
        "code": TWO_MODELS
        + 'out["apply"] = catch(session.compute.apply, "frob_norn", names=("frob_norm",))\n',
    },
    {
        "id": "p13.apply_summary",
        "what": 'compute.apply("stable_rank") summary: parameter_fields (dependencies included)',
        "code": TWO_MODELS
        + """
v = session.compute.apply("stable_rank")
s = getattr(v, "summary", v)
out["parameter_fields"] = sorted(s.parameter_fields)
v2 = session.compute.apply("stable_rank")
out["again skipped"] = [list(x) for x in getattr(v2, "summary", v2).skipped]
""",
    },
]
