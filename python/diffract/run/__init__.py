"""Orchestration: plan what is missing, run kernels chunk by chunk, report progress."""
