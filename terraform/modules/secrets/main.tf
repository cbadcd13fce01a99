# The platform's secrets, one per file the platform reads by reference: the keys are the file
# names under /run/secrets/ that conf/platform-compose.yaml names (`file:/run/secrets/<key>`),
# so the pods mount each one there (terraform/README.md) and the same platform file works on AWS
# as in the compose stack. Terraform creates the secrets only: their values are put by an
# operator (`aws secretsmanager put-secret-value`), so they never enter Terraform state or this
# repo.
locals {
  secrets = {
    slack_webhook_url     = "Slack incoming-webhook URL for Streamwarden pages"
    airflow_db_password   = "Password of the airflow role (Airflow's metadata database)"
    ledger_db_password    = "Password of the ledger role (Streamwarden's ledger database)"
    metastore_db_password = "Password of the metastore role (the Hive metastore database)"
    views_db_password     = "Password of the views role (the views jobs publish)"
  }
}

resource "aws_secretsmanager_secret" "platform" {
  #checkov:skip=CKV2_AWS_57:No Lambda can rotate these: a webhook URL is reissued in Slack, a role password changes with ALTER ROLE and a restart of its readers, both by hand.
  for_each                = local.secrets
  name                    = "${var.name}/${replace(each.key, "_", "-")}"
  description             = each.value
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
}

# The Slack secret existed alone before the database passwords joined it.
moved {
  from = aws_secretsmanager_secret.slack_webhook
  to   = aws_secretsmanager_secret.platform["slack_webhook_url"]
}
