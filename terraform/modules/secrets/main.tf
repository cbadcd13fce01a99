# The Slack incoming-webhook URL. Terraform creates the secret only: its value is put by an operator
# (`aws secretsmanager put-secret-value`), so it never enters Terraform state or this repo.
resource "aws_secretsmanager_secret" "slack_webhook" {
  #checkov:skip=CKV2_AWS_57:A Slack webhook URL cannot be rotated by a Lambda; it is reissued in Slack and put by hand.
  name                    = "${var.name}/slack-webhook-url"
  description             = "Slack incoming-webhook URL for Streamwarden pages"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
}
