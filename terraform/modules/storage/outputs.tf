output "bucket_names" {
  description = "Bucket name by purpose."
  value       = { for purpose, bucket in aws_s3_bucket.data : purpose => bucket.bucket }
}

output "bucket_arns" {
  description = "Bucket ARN by purpose."
  value       = { for purpose, bucket in aws_s3_bucket.data : purpose => bucket.arn }
}

output "kms_key_arn" {
  description = "The platform's KMS key."
  value       = aws_kms_key.platform.arn
}

output "encryption" {
  description = "Default encryption of each data bucket (checked by terraform test)."
  value = {
    for purpose, config in aws_s3_bucket_server_side_encryption_configuration.data : purpose => {
      sse_algorithm      = one(one(config.rule).apply_server_side_encryption_by_default).sse_algorithm
      bucket_key_enabled = one(config.rule).bucket_key_enabled
    }
  }
}

output "public_access_blocks" {
  description = "Public access block of each data bucket."
  value       = aws_s3_bucket_public_access_block.data
}

output "versioning" {
  description = "Versioning status by bucket purpose."
  value       = { for purpose, config in aws_s3_bucket_versioning.data : purpose => one(config.versioning_configuration).status }
}

output "lifecycle_days" {
  description = "Retention by bucket purpose: days until current objects and noncurrent versions expire (null: never)."
  value = {
    for purpose, bucket in local.buckets : purpose => {
      expire_current    = bucket.expire_current_days
      expire_noncurrent = bucket.expire_noncurrent_days
    }
  }
}
