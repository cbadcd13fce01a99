"""The router job: fans source events out to routes by declarative Spark SQL filters."""
