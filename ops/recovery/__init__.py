"""Putting a job back to a known point: rewind, restate, upgrade with rollback, state reading, and
removing the output of batches that never committed."""
