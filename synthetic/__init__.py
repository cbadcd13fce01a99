"""Synthetic input for demos, tests and benchmarks: the event generator and each job's scenario."""
