"""The warehouse: each job's results as a catalog table, `warehouse.<job>`, that only ever shows
audited data (docs/architecture.md §6). `metastore` configures Spark for the shared Hive metastore,
`table` owns the table, its versioned partitions and their publication, history and rollback.
"""
