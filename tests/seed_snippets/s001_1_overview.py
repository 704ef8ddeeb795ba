from diffract import Session

session = Session(profile="local")
with session:
    session.models.add(model, model_id="run-001")
    session.compute.apply("frob_norm", "stable_rank")
    results = session.results.export_metrics(
        "frob_norm", "stable_rank", export_format="dict"
    )
