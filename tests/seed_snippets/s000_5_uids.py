with session:
    uids = ["abc123", "def456"]
    session.filter(param_ids=uids).compute.apply("frob_norm")
