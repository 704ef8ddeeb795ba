with session:
    # Attention layers in gpt2-small only
    session.filter(
        model_ids=["gpt2-small"],
        param_names=["re:.*attn.*"],
    ).compute.apply("frob_norm")
