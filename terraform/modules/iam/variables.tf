variable "name" {
  description = "Name prefix of the roles."
  type        = string
}

variable "account_id" {
  description = "The AWS account."
  type        = string
}

variable "bucket_arns" {
  description = "Bucket ARN by purpose: checkpoints, savepoints, archive, warehouse."
  type        = map(string)
}

variable "kms_key_arn" {
  description = "The key of the buckets and the secret."
  type        = string
}

variable "secret_arns" {
  description = "The platform's secrets the orchestrator's pods mount (Slack webhook, database passwords)."
  type        = list(string)
}

variable "cluster_name" {
  description = "The EKS cluster whose pods assume the driver and orchestrator roles."
  type        = string
}

variable "cluster_arn" {
  description = "ARN of that cluster."
  type        = string
}

variable "ecr_repository_arn" {
  description = "The image repository CI pushes to."
  type        = string
}

variable "ci_repository" {
  description = "GitHub owner/name whose main-branch workflows assume the CI role."
  type        = string
}

variable "kubernetes_namespace" {
  description = "Namespace of the Airflow and Spark driver service accounts."
  type        = string
}
