"""The warehouse: each job's results as a catalog table, `warehouse.<job>`, that only ever shows
audited data (docs/architecture.md §6).

- `metastore` configures Spark for the shared Hive metastore; `table` owns the table, its
  versioned partitions and their publication, history and rollback; `sinklog` reads and expires
  the job's sink log; `writers` is the table lock every writer holds.
- Write-audit-publish: `rewrite` (the write), `audit` (Great Expectations) and `compact` (one
  pass over the closed partitions that changed).
- The two Spark applications over them, each run by spark-submit: `compaction` (the nightly
  compaction and a restatement's republish) and `publish` (a finished backfill into the table).
  They are the only modules of the wing that load pyspark and Great Expectations at import.
"""
