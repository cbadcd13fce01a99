"""Nightly compaction of a job's sink into its warehouse table: write, audit, publish (DESIGN.md §6)."""
