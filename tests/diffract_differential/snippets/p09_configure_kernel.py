"""Point 9: configure_kernel's return value and the values Diffract documents.

Diffract's kernel configuration is process-wide, so these snippets run apart from the others
(``isolate``); each sets every value it then reads.
"""

from dd_setup import GAUSS48, SMALL, value_of


def cfg(sid: str, what: str, call: str, setup: str = GAUSS48, after: str = "") -> dict:
    """A snippet recording ``call``'s return value (``.as_dict()`` of it) or what it raised."""
    return {
        "id": sid,
        "what": what,
        "isolate": True,
        "code": setup
        + f"""
r = catch(lambda: {call})
out["returned"] = r if isinstance(r, dict) and "raises" in r else type(r).__name__
out["as_dict"] = catch(lambda: r.as_dict()) if not (isinstance(r, dict) and "raises" in r) else None
"""
        + after,
    }


SNIPPETS = [
    cfg(
        "p09.hard_rank_as_dict",
        "configure_kernel('hard_rank', rtol=1e-3).as_dict()",
        'session.compute.configure_kernel("hard_rank", rtol=1e-3)',
    ),
    cfg(
        "p09.allow_cuda",
        "configure_kernel('weights_svd', allow_cuda=False)",
        'session.compute.configure_kernel("weights_svd", allow_cuda=False)',
    ),
    cfg(
        "p09.tpl_fit_method_powerlaw",
        "configure_kernel('truncated_power_law_fit', fit_method='powerlaw')",
        'session.compute.configure_kernel("truncated_power_law_fit", fit_method="powerlaw")',
    ),
    cfg(
        "p09.expon_fit_method_diffract",
        "configure_kernel('exponential_fit', fit_method='diffract')",
        'session.compute.configure_kernel("exponential_fit", fit_method="diffract")',
    ),
    cfg(
        "p09.pl_fit_method_auto",
        "configure_kernel('power_law_fit', fit_method='auto')",
        'session.compute.configure_kernel("power_law_fit", fit_method="auto")',
    ),
    cfg(
        "p09.weights_rand_seed",
        "configure_kernel('weights_rand', seed=7)",
        'session.compute.configure_kernel("weights_rand", seed=7)',
    ),
    cfg(
        "p09.unknown_key",
        "configure_kernel('hard_rank', bogus=1)",
        'session.compute.configure_kernel("hard_rank", bogus=1)',
    ),
    cfg(
        "p09.unknown_kernel",
        "configure_kernel('no_such_kernel', rtol=1)",
        'session.compute.configure_kernel("no_such_kernel", rtol=1)',
    ),
    cfg(
        "p09.field_name_not_kernel",
        "configure_kernel('pl_alpha', fit_method='auto') (a field, not a kernel)",
        'session.compute.configure_kernel("pl_alpha", fit_method="auto")',
    ),
    cfg(
        "p09.hard_rank_configured_value",
        "hard_rank of the 48x48 Gaussian after configure_kernel('hard_rank', rtol=0.5)",
        'session.compute.configure_kernel("hard_rank", rtol=0.5)',
        after='catch(session.compute.apply, "hard_rank")\n' + value_of("hard_rank"),
    ),
    cfg(
        "p09.powerlaw_fit_then_apply",
        "tpl_alpha after fit_method='powerlaw'",
        'session.compute.configure_kernel("truncated_power_law_fit", fit_method="powerlaw")',
        setup=SMALL,
        after='out["apply"] = catch(lambda: (session.compute.apply("tpl_alpha"), "ok")[1])\n',
    ),
]
