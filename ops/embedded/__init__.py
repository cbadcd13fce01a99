"""The embedded one-machine platform: SeaweedFS, Airflow's processes and the event generator."""
