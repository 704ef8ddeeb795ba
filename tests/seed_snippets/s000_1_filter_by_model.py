from diffract import Session

session = Session(profile="local")

with session:
    session.models.add(model, model_id="gpt2-small")
    
    # Compute only for a specific model
    session.filter(model_ids=["gpt2-small"]).compute.apply("frob_norm")
    
    # Export only from specific models
    df = session.filter(model_ids=["gpt2-small"]).results.export_metrics(
        "frob_norm",
        export_format="pandas",
    )
