with session:
    # All attention weights
    session.filter(param_names=["re:.*attn.*weight"]).compute.apply("frob_norm")
    
    # All projection layers
    session.filter(param_names=["re:.*proj$"]).compute.apply("frob_norm")
    
    # Specific layer range
    session.filter(param_names=["re:layer\\.[0-5]\\..*"]).compute.apply("frob_norm")
