"""Point 14: NumPy dicts with masked, complex, empty, 1-D, integer and 3-D arrays."""

W = """
from diffract import Session
session = Session(profile="ram")
g = np.random.default_rng(14)
ok = g.normal(size=(8, 6))
"""


def add_then(sid: str, what: str, extra: str, after: str = "") -> dict:
    """Add ``{"ok": ok, "odd": <extra>}``; record the add's outcome and the names stored."""
    return {
        "id": sid,
        "what": what,
        "code": W
        + f"""
odd = {extra}
out["add"] = catch(lambda: (session.models.add({{"ok": ok, "odd": odd}}, model_id="m"), "ok")[1])
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
"""
        + after,
    }


SNIPPETS = [
    add_then(
        "p14.masked",
        "a masked array beside a plain one",
        "np.ma.masked_array(g.normal(size=(8, 6)), mask=g.random((8, 6)) < 0.5)",
    ),
    {
        "id": "p14.masked_alone_frob",
        "what": "a masked array alone: add, then frob_norm",
        "code": W
        + """
m = np.ma.masked_array(g.normal(size=(8, 6)), mask=g.random((8, 6)) < 0.5)
out["add"] = catch(lambda: (session.models.add({"m": m}, model_id="m"), "ok")[1])
if session.models.list():
    session.compute.apply("frob_norm")
    out["frob"] = [r.get("frob_norm") for r in session.results.export_metrics("frob_norm", export_format="list")]
""",
    },
    add_then("p14.complex", "a complex array beside a plain one", "g.normal(size=(8, 6)) + 1j"),
    add_then("p14.empty", "an empty (0x6) array beside a plain one", "np.zeros((0, 6))"),
    add_then("p14.one_d", "a 1-D array beside a plain one", "g.normal(size=6)"),
    add_then("p14.single_element", "a 1x1 array beside a plain one", "np.ones((1, 1))"),
    add_then("p14.int", "an integer 2-D array beside a plain one", "np.arange(12).reshape(3, 4)"),
    add_then("p14.three_d", "a 3-D array beside a plain one", "g.normal(size=(2, 3, 4))"),
    add_then(
        "p14.float16",
        "a float16 array beside a plain one",
        "g.normal(size=(8, 6)).astype(np.float16)",
        after='out["dtypes"] = sorted({str(v) for p in session.models.parameters.list(verbose=True) for k, v in p["other_meta"].items() if "dtype" in k})\n',
    ),
    {
        "id": "p14.only_complex",
        "what": "a dict holding only a complex array",
        "code": W
        + """
out["add"] = catch(lambda: (session.models.add({"c": g.normal(size=(8, 6)) + 1j}, model_id="m"), "ok")[1])
out["models"] = session.models.list()
""",
    },
]
