"""The reconcile loop: pure policy apart from the supervisor that observes and acts on it."""
