with session:
    session.filter(
        param_names=["layer.0.weight", "layer.1.weight"]
    ).compute.apply("frob_norm")
