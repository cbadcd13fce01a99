"""Shared fixtures. Real components only: each support module starts what its fixtures need."""

pytest_plugins = [
    "tests.support.airflow",
    "tests.support.drivers",
    "tests.support.platform",
    "tests.support.slack",
    "tests.support.s3",
    "tests.support.spark",
]
