"""What a running Spark driver needs from the platform, and the files it leaves for the supervisor.

Nothing here imports the ledger, boto3, Slack or the control loop: a driver loads only this.
"""
