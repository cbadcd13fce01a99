output "bucket_names" {
  description = "The platform's buckets by purpose (checkpoints, savepoints, archive, warehouse)."
  value       = module.storage.bucket_names
}

output "kms_key_arn" {
  description = "The key that encrypts the buckets, the secrets, the database and the log groups."
  value       = module.storage.kms_key_arn
}

output "secret_names" {
  description = "Secrets Manager secret names by the file the platform reads each from (/run/secrets/<key>); their values are put by an operator."
  value       = module.secrets.secret_names
}

output "postgres_address" {
  description = "Host name of the PostgreSQL instance with the airflow, ledger, metastore and views databases."
  value       = module.database.address
}

output "postgres_master_secret_arn" {
  description = "The secret RDS keeps the master password in (for running conf/postgres/init-databases.sh once)."
  value       = module.database.master_user_secret_arn
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
