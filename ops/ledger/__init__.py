"""The ledger: the database of desired state, runs, decisions, savepoints and the alert outbox."""
