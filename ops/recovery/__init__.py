"""Putting a job back to a known point: rewind, restate, upgrade with rollback, and state reading."""
