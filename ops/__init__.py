"""Streamwarden's platform library and the `warden` CLI, in wings that each own one concern.

    spec/        the typed models of platform.yaml and job files, and `JobPaths` (every path of a job)
    driver/      all a Spark driver may import: listener, heartbeat, preview taps, checkpoint
                 reading, reference tables, the replay queue
    ledger/      the ledger database (desired state, runs, decisions, savepoints, alert outbox)
    control/     the reconcile loop: pure policy (`policy`), the supervisor that observes and acts,
                 health, launcher, locks, alerts
    savepoints/  savepoint copies of checkpoints in S3, their catalogue and retention
    recovery/    rewind, restate, upgrade, the state reader, orphaned sink output
    embedded/    the one-machine platform: S3 server, Airflow processes, generator
    atomic, clock, ports, s3, exceptions: small modules every wing shares

Nothing in ops/ imports Airflow; dags/ and plugins/ call into it. jobs/ imports only `ops.spec`,
`ops.driver` and the shared small modules. ruff's banned-import rules hold these walls.
"""
