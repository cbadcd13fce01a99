"""The operations console's data: the job board (`board`) and the bottleneck diagnosis
(`diagnosis`), read from the ledger and the drivers' files, never from Spark. The Airflow plugin
in `plugins/streamwarden_airflow/console.py` serves them."""
