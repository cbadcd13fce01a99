# The platform's PostgreSQL, as the compose stack's postgres service: one RDS instance holding
# Airflow's metadata, the ledger, the Hive metastore every Spark process shares and the published
# views, each database owned by its own role (conf/postgres/init-databases.sh, run once by an
# operator as the master user). Only the EKS cluster's security group reaches it.
locals {
  # The log types RDS exports for PostgreSQL; their groups exist first, encrypted and retained.
  log_exports = ["postgresql", "upgrade"]
}

resource "aws_db_subnet_group" "platform" {
  name       = var.name
  subnet_ids = var.subnet_ids
}

resource "aws_security_group" "database" {
  name        = "${var.name}-postgres"
  description = "PostgreSQL of ${var.name}, reachable from the EKS cluster only"
  vpc_id      = var.vpc_id

  # No egress rule: the server opens no connections (Terraform drops AWS's default allow-all).
  ingress {
    description     = "PostgreSQL from the pods and nodes of the EKS cluster"
    from_port       = 5432
    to_port         = 5432
    protocol        = "tcp"
    security_groups = [var.client_security_group_id]
  }
}

resource "aws_db_parameter_group" "platform" {
  name   = "${var.name}-postgres${var.engine_major_version}"
  family = "postgres${var.engine_major_version}"

  parameter {
    name  = "rds.force_ssl"
    value = "1"
  }
  # Schema changes (Airflow's and the ledger's migrations, DataNucleus creating metastore tables)
  # and statements slower than a second are logged.
  parameter {
    name  = "log_statement"
    value = "ddl"
  }
  parameter {
    name  = "log_min_duration_statement"
    value = "1000"
  }
}

resource "aws_cloudwatch_log_group" "database" {
  for_each          = toset(local.log_exports)
  name              = "/aws/rds/instance/${var.name}/${each.key}"
  retention_in_days = 365
  kms_key_id        = var.kms_key_arn
}

resource "aws_iam_role" "monitoring" {
  name = "${var.name}-rds-monitoring"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "monitoring.rds.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
}

resource "aws_iam_role_policy_attachment" "monitoring" {
  role       = aws_iam_role.monitoring.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole"
}

resource "aws_db_instance" "platform" {
  #checkov:skip=CKV_AWS_161:The platform's roles log in with passwords from Secrets Manager; IAM tokens expire in 15 minutes and neither Airflow's engines nor the metastore's pool renew them.
  identifier     = var.name
  engine         = "postgres"
  engine_version = var.engine_major_version
  instance_class = var.instance_class

  allocated_storage     = var.allocated_storage_gb
  max_allocated_storage = var.allocated_storage_gb * 5
  storage_type          = "gp3"
  storage_encrypted     = true
  kms_key_id            = var.kms_key_arn

  # RDS keeps the master password in a Secrets Manager secret of its own, so it is in no state file.
  username                      = "streamwarden_admin"
  manage_master_user_password   = true
  master_user_secret_kms_key_id = var.kms_key_arn

  db_subnet_group_name   = aws_db_subnet_group.platform.name
  vpc_security_group_ids = [aws_security_group.database.id]
  parameter_group_name   = aws_db_parameter_group.platform.name
  publicly_accessible    = false
  multi_az               = var.multi_az
  ca_cert_identifier     = "rds-ca-rsa2048-g1"

  backup_retention_period    = 14
  copy_tags_to_snapshot      = true
  deletion_protection        = true
  skip_final_snapshot        = false
  final_snapshot_identifier  = "${var.name}-final"
  auto_minor_version_upgrade = true

  enabled_cloudwatch_logs_exports = local.log_exports
  monitoring_interval             = 60
  monitoring_role_arn             = aws_iam_role.monitoring.arn
  performance_insights_enabled    = true
  performance_insights_kms_key_id = var.kms_key_arn

  depends_on = [aws_cloudwatch_log_group.database, aws_iam_role_policy_attachment.monitoring]
}
