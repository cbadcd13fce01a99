"""Backfill the Kappa+ way: a job's own streaming query over the archive (docs/architecture.md §6).

`plan` chooses the archive partitions of a range and stages them, `run` feeds them to the Spark
application (`jobs.backfill`), checks its staged output and runs the publish into the warehouse
table through the quality gate (`ops.warehouse.publish`: or, for a candidate version, its diff
against the table), `bootstrap` turns a finished backfill into a savepoint a live job starts from.
The run directory both sides share is described in `ops.driver.backfill`.
"""
