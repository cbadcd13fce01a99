# Streamwarden on AWS: S3 buckets, the PostgreSQL of Airflow, the ledger and the Hive metastore,
# IAM roles, the platform's secrets and an EKS cluster whose nodes run Airflow, the Spark
# standalone cluster and the drivers from the repo's image (README.md says how, and what is not
# built yet).
locals {
  name = "streamwarden-${var.environment}"
  # Log groups of the platform's services, which CloudWatch Logs encrypts with the platform key.
  log_group_prefixes = ["/aws/eks/${local.name}/", "/aws/rds/instance/${local.name}/"]
}

data "aws_caller_identity" "current" {}

module "storage" {
  source                           = "./modules/storage"
  name                             = local.name
  account_id                       = data.aws_caller_identity.current.account_id
  region                           = var.region
  log_group_prefixes               = local.log_group_prefixes
  savepoint_max_age_days           = var.savepoint_max_age_days
  archive_retention_days           = var.archive_retention_days
  warehouse_version_retention_days = var.warehouse_version_retention_days
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

module "database" {
  source                   = "./modules/database"
  name                     = local.name
  vpc_id                   = var.vpc_id
  subnet_ids               = var.private_subnet_ids
  client_security_group_id = module.compute.cluster_security_group_id
  kms_key_arn              = module.storage.kms_key_arn
  engine_major_version     = var.postgres_major_version
  instance_class           = var.postgres_instance_class
  allocated_storage_gb     = var.postgres_storage_gb
  multi_az                 = var.postgres_multi_az
}

module "iam" {
  source               = "./modules/iam"
  name                 = local.name
  account_id           = data.aws_caller_identity.current.account_id
  bucket_arns          = module.storage.bucket_arns
  kms_key_arn          = module.storage.kms_key_arn
  secret_arns          = values(module.secrets.secret_arns)
  cluster_name         = module.compute.cluster_name
  cluster_arn          = module.compute.cluster_arn
  ecr_repository_arn   = module.compute.ecr_repository_arn
  ci_repository        = var.ci_repository
  kubernetes_namespace = "streamwarden"
}
