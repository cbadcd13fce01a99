output "address" {
  description = "Host name of the instance (the host of every database URL)."
  value       = aws_db_instance.platform.address
}

output "port" {
  description = "PostgreSQL's port."
  value       = aws_db_instance.platform.port
}

output "master_user_secret_arn" {
  description = "The secret RDS keeps the master password in (for running init-databases.sh)."
  value       = one(aws_db_instance.platform.master_user_secret[*].secret_arn)
}

output "instance" {
  description = "What terraform test checks of the instance."
  value = {
    engine              = aws_db_instance.platform.engine
    engine_version      = aws_db_instance.platform.engine_version
    storage_encrypted   = aws_db_instance.platform.storage_encrypted
    kms_key_id          = aws_db_instance.platform.kms_key_id
    publicly_accessible = aws_db_instance.platform.publicly_accessible
    deletion_protection = aws_db_instance.platform.deletion_protection
    subnet_ids          = aws_db_subnet_group.platform.subnet_ids
    ingress = [
      for rule in aws_security_group.database.ingress : {
        from_port = rule.from_port, to_port = rule.to_port, security_groups = rule.security_groups
      }
    ]
  }
}
