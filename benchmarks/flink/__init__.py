"""The Flink SQL side of `benchmarks.flink_compare`: per-job statements and the PyFlink runner.

The modules here that build SQL (`landing_sql`, one per job kind) run in the project's venv and
import no PyFlink; `run_sql.py` runs in the benchmark's own PyFlink venv and imports nothing from
the project.
"""
