"""Point 4: numbers exported under the same field name."""

from dd_setup import GAUSS48, SMALL, SPECTRUM, TWO_MODELS, value_of


def fields(setup: str, *names: str) -> str:
    """Apply ``names`` and record each per (model, name)."""
    code = setup + f"session.compute.apply(*{list(names)!r})\n"
    return code + "".join(value_of(n) for n in names)


SNIPPETS = [
    {
        "id": "p04.param_norm",
        "what": "param_norm of models a and b (IN_MODEL aggregate)",
        "code": TWO_MODELS
        + """
session.compute.apply("param_norm")
out["param_norm"] = rows(session.results.export_aggregates("param_norm", export_format="list"))
""",
    },
    {
        "id": "p04.hard_rank_gauss48",
        "what": "hard_rank of a 48x48 Gaussian",
        "code": fields(GAUSS48, "hard_rank"),
    },
    {
        "id": "p04.hard_rank_gauss48_seeds",
        "what": "hard_rank of twelve 48x48 Gaussians (seeds 0-11)",
        "code": """
from diffract import Session
session = Session(profile="ram")
session.models.add({f"w{i:02d}": np.random.default_rng(i).normal(size=(48, 48)) for i in range(12)}, model_id="g")
session.compute.apply("hard_rank")
"""
        + value_of("hard_rank"),
    },
    {
        "id": "p04.hard_rank_deficient",
        "what": "hard_rank of a 20x10 matrix of rank 3",
        "code": """
from diffract import Session
session = Session(profile="ram")
g = np.random.default_rng(4)
session.models.add({"w": g.normal(size=(20, 3)) @ g.normal(size=(3, 10))}, model_id="r")
session.compute.apply("hard_rank")
"""
        + value_of("hard_rank"),
    },
    {
        "id": "p04.basic_norms",
        "what": "frob_norm, nuclear_norm, l2_norm, stable_rank, effective_rank (control)",
        "code": fields(
            GAUSS48, "frob_norm", "nuclear_norm", "l2_norm", "stable_rank", "effective_rank"
        ),
    },
    {
        "id": "p04.log_norms",
        "what": "log_norm and log_spectral_norm aggregates of a and b",
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm", "log_spectral_norm")
for f in ("log_norm", "log_spectral_norm"):
    out[f] = rows(session.results.export_aggregates(f, export_format="list"))
""",
    },
    {
        "id": "p04.mp_fit",
        "what": "mp_esd_max, mp_esd_min, mp_bulk_std on a heavy-tailed and a Gaussian slice",
        "code": fields(SPECTRUM, "mp_esd_max", "mp_esd_min", "mp_bulk_std"),
    },
    {
        "id": "p04.mp_presence",
        "what": "mp_presence, mp_concentration, mp_ks",
        "code": fields(SPECTRUM, "mp_presence", "mp_concentration", "mp_ks"),
    },
    {
        "id": "p04.mp_spikes_soft_rank",
        "what": "mp_num_spikes, mp_soft_rank, mp_sval_max",
        "code": fields(SPECTRUM, "mp_num_spikes", "mp_soft_rank", "mp_sval_max"),
    },
    {
        "id": "p04.tw_esd_bound",
        "what": "tw_esd_bound and tw_num_spikes",
        "code": fields(SPECTRUM, "tw_esd_bound", "tw_num_spikes"),
    },
    {
        "id": "p04.num_spikes_types",
        "what": "Python types of mp_num_spikes and tw_num_spikes",
        "code": SPECTRUM
        + """
session.compute.apply("mp_num_spikes", "tw_num_spikes")
r = session.results.export_metrics("mp_num_spikes", "tw_num_spikes", export_format="dict")
e = next(iter(r.values()))["fields"]
out["types"] = {k: type(v).__name__ for k, v in sorted(e.items())}
""",
    },
    {
        "id": "p04.randomized_seed42",
        "what": "randomized-weights fields (seed 42): esd_rand_max, max_weights_rand_sval, w1_rand_distance",
        "code": fields(
            GAUSS48, "esd_rand_max", "esd_rand_min", "max_weights_rand_sval", "w1_rand_distance"
        ),
    },
    {
        "id": "p04.weights_rand_values",
        "what": "weights_rand (seed 42): first row",
        "code": GAUSS48
        + """
session.compute.apply("weights_rand")
r = session.results.export_metrics("weights_rand", export_format="list")[0]["weights_rand"]
out["first row"] = np.asarray(r)[0, :6]
out["same multiset"] = bool(np.allclose(np.sort(np.asarray(r).ravel()), np.sort(w.ravel())))
""",
    },
    {
        "id": "p04.tpl_fit",
        "what": "tpl_alpha, tpl_lambda, tpl_alpha_norm, tpl_ks on a heavy-tailed spectrum and a Gaussian",
        "code": fields(SPECTRUM, "tpl_alpha", "tpl_lambda", "tpl_alpha_norm", "tpl_ks"),
    },
    {
        "id": "p04.tpl_alpha_positive",
        "what": "tpl_alpha is positive on a small Gaussian slice",
        "code": SMALL
        + """
session.compute.apply("tpl_alpha")
out["all positive"] = all(r["tpl_alpha"] > 0 for r in session.results.export_metrics("tpl_alpha", export_format="list"))
""",
    },
    {
        "id": "p04.pl_alpha",
        "what": "pl_alpha, pl_esd_xmin, pl_ks",
        "code": fields(SPECTRUM, "pl_alpha", "pl_esd_xmin", "pl_ks"),
    },
    {
        "id": "p04.expon_lambda",
        "what": "expon_lambda and expon_ks",
        "code": fields(SPECTRUM, "expon_lambda", "expon_ks"),
    },
    {
        "id": "p04.esd_extremes",
        "what": "esd_max, esd_min, aspect_ratio, weights_std (control)",
        "code": fields(SPECTRUM, "esd_max", "esd_min", "aspect_ratio", "weights_std"),
    },
]
