# Streamwarden on AWS: S3 buckets, the Glue catalog, IAM roles, the Slack webhook secret and an EKS
# cluster that runs Airflow and the Spark 4.3 drivers from the repo's image (README.md says why).
locals {
  name = "streamwarden-${var.environment}"
}

data "aws_caller_identity" "current" {}

module "storage" {
  source                           = "./modules/storage"
  name                             = local.name
  account_id                       = data.aws_caller_identity.current.account_id
  savepoint_max_age_days           = var.savepoint_max_age_days
  archive_retention_days           = var.archive_retention_days
  warehouse_version_retention_days = var.warehouse_version_retention_days
}

module "catalog" {
  source           = "./modules/catalog"
  name             = local.name
  warehouse_bucket = module.storage.bucket_names["warehouse"]
}

module "secrets" {
  source      = "./modules/secrets"
  name        = local.name
  kms_key_arn = module.storage.kms_key_arn
}

module "compute" {
  source              = "./modules/compute"
  name                = local.name
  vpc_id              = var.vpc_id
  subnet_ids          = var.private_subnet_ids
  kms_key_arn         = module.storage.kms_key_arn
  kubernetes_version  = var.kubernetes_version
  node_instance_types = var.node_instance_types
  node_count          = var.node_count
}

module "iam" {
  source               = "./modules/iam"
  name                 = local.name
  account_id           = data.aws_caller_identity.current.account_id
  region               = var.region
  bucket_arns          = module.storage.bucket_arns
  kms_key_arn          = module.storage.kms_key_arn
  glue_database_name   = module.catalog.database_name
  slack_secret_arn     = module.secrets.slack_webhook_secret_arn
  cluster_name         = module.compute.cluster_name
  cluster_arn          = module.compute.cluster_arn
  ecr_repository_arn   = module.compute.ecr_repository_arn
  ci_repository        = var.ci_repository
  kubernetes_namespace = "streamwarden"
}
