"""Point 15: filter(param_ids=...) with unknown uids."""

from dd_setup import TWO_MODELS

SNIPPETS = [
    {
        "id": "p15.unknown_uid",
        "what": 'filter(param_ids=["nope"]) then list the scope',
        "code": TWO_MODELS
        + """
out["filter"] = catch(lambda: len(session.filter(param_ids=["nope"]).models.parameters.list()))
""",
    },
    {
        "id": "p15.known_and_unknown_uid",
        "what": "filter(param_ids=[a known uid, an unknown one])",
        "code": TWO_MODELS
        + """
uid = session.models.parameters.list()[0]["uid"]
out["filter"] = catch(lambda: len(session.filter(param_ids=[uid, "nope"]).models.parameters.list()))
""",
    },
    {
        "id": "p15.known_uid",
        "what": "filter(param_ids=[a known uid]) (control)",
        "code": TWO_MODELS
        + """
p = session.models.parameters.list()[0]
got = session.filter(param_ids=[p["uid"]]).models.parameters.list()
out["same"] = [(q["model_id"], q["name"]) for q in got] == [(p["model_id"], p["name"])]
""",
    },
    {
        "id": "p15.uid_as_string",
        "what": "filter(param_ids=<a bare uid string>)",
        "code": TWO_MODELS
        + """
uid = session.models.parameters.list()[0]["uid"]
out["n"] = catch(lambda: len(session.filter(param_ids=uid).models.parameters.list()))
""",
    },
]
