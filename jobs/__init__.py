"""Streamwarden's PySpark jobs: pure transforms per job, one shared driver runtime, one runner.

`jobs.runtime` builds the session, reads and parses the landing zone and runs a query with the
telemetry listener installed; `jobs.runner` is the process entrypoint (`python -m jobs.runner`);
`jobs.<kind>.transform` holds each job kind's `DataFrame -> DataFrame` functions.
"""
