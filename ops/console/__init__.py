"""The operations console's data: the job board (`board`), the bottleneck diagnosis (`diagnosis`)
and state lookups, read from the ledger and the drivers' files (Spark only in a process of its
own), and the board's New job and Edit form (`job_form`, checked by `drafts`, written by
`authoring`). The Airflow plugin in `plugins/streamwarden_airflow/console_app.py` serves them."""
