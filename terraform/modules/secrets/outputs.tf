output "secret_arns" {
  description = "Secret ARN by the file name the platform reads it from (/run/secrets/<name>)."
  value       = { for key, secret in aws_secretsmanager_secret.platform : key => secret.arn }
}

output "secret_names" {
  description = "Secret name by the file name the platform reads it from."
  value       = { for key, secret in aws_secretsmanager_secret.platform : key => secret.name }
}
