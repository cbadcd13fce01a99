output "bucket_names" {
  description = "The platform's buckets by purpose (checkpoints, savepoints, archive, warehouse)."
  value       = module.storage.bucket_names
}

output "kms_key_arn" {
  description = "The key that encrypts the buckets and the Slack secret."
  value       = module.storage.kms_key_arn
}

output "glue_database_name" {
  description = "The Glue catalog database of the warehouse tables."
  value       = module.catalog.database_name
}

output "slack_webhook_secret_arn" {
  description = "Secrets Manager secret to store the Slack incoming-webhook URL in."
  value       = module.secrets.slack_webhook_secret_arn
}

output "role_arns" {
  description = "IAM roles: the Spark drivers, the orchestrator (Airflow) and CI."
  value       = module.iam.role_arns
}

output "cluster_name" {
  description = "The EKS cluster that runs Airflow and the Spark jobs."
  value       = module.compute.cluster_name
}

output "ecr_repository_url" {
  description = "Where CI pushes the repo's image."
  value       = module.compute.ecr_repository_url
}
