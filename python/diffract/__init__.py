"""diffract: inspect and track neural-network weights (placeholder, filled by the engine)."""
