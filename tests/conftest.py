"""Shared fixtures. Real components only: each support module starts what its fixtures need."""

pytest_plugins = [
    "tests.support.airflow",
    # Before drivers, which imports it: pytest rewrites asserts only in modules it imports first.
    "tests.support.platform",
    "tests.support.drivers",
    "tests.support.slack",
    "tests.support.s3",
    "tests.support.spark",
]
