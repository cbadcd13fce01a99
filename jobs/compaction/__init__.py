"""Nightly compaction of a job's sink into its warehouse table: write, audit, publish
(docs/architecture.md §6)."""
