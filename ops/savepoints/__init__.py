"""Savepoints: consistent, content-addressed copies of a job's checkpoint in S3, and retention."""
