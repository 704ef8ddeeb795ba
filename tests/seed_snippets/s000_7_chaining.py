with session:
    gpt2 = session.filter(model_ids=["gpt2-small"])
    gpt2.compute.apply("frob_norm", "stable_rank")

    # Narrow the existing scope to attention layers
    attn = gpt2.filter(param_names=["re:.*attn.*"])
    df = attn.results.export_metrics("frob_norm", export_format="pandas")
