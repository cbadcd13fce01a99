"""Backfill the Kappa+ way: a job's own streaming query over the archive (DESIGN.md section 6).

`plan` chooses the archive partitions of a range and stages them, `run` feeds them to the Spark
application (`jobs.backfill`) and checks its staged output, `bootstrap` turns a finished backfill
into a savepoint a live job starts from, `diff` compares a candidate version's output with the
job's. The run directory both sides share is described in `ops.driver.backfill`.
"""
