# The platform's buckets. Every one: SSE-KMS with the platform key (bucket keys on), public access
# blocked, TLS-only, objects owned by the bucket owner, access logged to the log bucket.
# Versioning protects what cannot be recomputed (savepoints, the archive, published warehouse
# versions); checkpoints are rewritten and purged by Spark every batch and are protected by
# savepoints instead.
locals {
  buckets = {
    checkpoints = {
      versioned = false
      # Spark purges old checkpoint files itself; only failed uploads need cleaning.
      expire_current_days    = null
      expire_noncurrent_days = null
    }
    savepoints = {
      versioned = true
      # The platform deletes savepoints past savepoints.max_age_hours (always keeping the newest
      # good one), so current objects never expire by age here; a deleted one stays recoverable
      # for the same period.
      expire_current_days    = null
      expire_noncurrent_days = var.savepoint_max_age_days
    }
    archive = {
      versioned              = true
      expire_current_days    = var.archive_retention_days
      expire_noncurrent_days = 7
    }
    warehouse = {
      versioned              = true
      expire_current_days    = null
      expire_noncurrent_days = var.warehouse_version_retention_days
    }
  }
}

# The platform's key: buckets, secrets, the database, the image repository, Kubernetes secrets
# and the log groups. The services that act for a caller (S3, Secrets Manager, RDS, EKS) use it
# within that caller's IAM permissions; CloudWatch Logs encrypts as itself, so the key policy
# names it, for the platform's log groups only.
resource "aws_kms_key" "platform" {
  description             = "${var.name}: buckets, secrets, database and log groups"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdministersTheKeyThroughIAM"
        Effect    = "Allow"
        Principal = { AWS = "arn:aws:iam::${var.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchLogsEncryptsThePlatformsLogGroups"
        Effect    = "Allow"
        Principal = { Service = "logs.${var.region}.amazonaws.com" }
        Action    = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
        Resource  = "*"
        Condition = {
          ArnLike = {
            "kms:EncryptionContext:aws:logs:arn" = [for prefix in var.log_group_prefixes : "arn:aws:logs:${var.region}:${var.account_id}:log-group:${prefix}*"]
          }
        }
      },
    ]
  })
}

resource "aws_kms_alias" "platform" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.platform.key_id
}

resource "aws_s3_bucket" "data" {
  #checkov:skip=CKV_AWS_144:Cross-region replication is a disaster-recovery choice per deployment; savepoints and the archive are versioned here.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events: the platform lists the savepoint manifests it writes itself.
  #checkov:skip=CKV_AWS_21:Versioning is set per purpose in aws_s3_bucket_versioning.data below (checkov cannot follow for_each there; tests/stack.tftest.hcl asserts it): on for savepoints, archive and warehouse; off for checkpoints, which Spark rewrites and purges every batch and savepoints protect.
  for_each = local.buckets
  bucket   = "${var.name}-${each.key}"
}

resource "aws_s3_bucket_versioning" "data" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.data[each.key].id
  versioning_configuration {
    status = each.value.versioned ? "Enabled" : "Suspended"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "data" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.data[each.key].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.platform.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_public_access_block" "data" {
  for_each                = local.buckets
  bucket                  = aws_s3_bucket.data[each.key].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "data" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.data[each.key].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_policy" "tls_only" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.data[each.key].id
  policy   = data.aws_iam_policy_document.tls_only[each.key].json
  # A bucket policy cannot be put while the public access block is being changed.
  depends_on = [aws_s3_bucket_public_access_block.data]
}

data "aws_iam_policy_document" "tls_only" {
  for_each = local.buckets
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    resources = [aws_s3_bucket.data[each.key].arn, "${aws_s3_bucket.data[each.key].arn}/*"]
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "data" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.data[each.key].id
  # Lifecycle rules on a versioned bucket need versioning configured first.
  depends_on = [aws_s3_bucket_versioning.data]

  rule {
    id     = "abort-incomplete-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  dynamic "rule" {
    for_each = each.value.expire_current_days == null ? [] : [each.value.expire_current_days]
    content {
      id     = "expire-after-retention"
      status = "Enabled"
      filter {}
      expiration {
        days = rule.value
      }
    }
  }

  dynamic "rule" {
    for_each = each.value.expire_noncurrent_days == null ? [] : [each.value.expire_noncurrent_days]
    content {
      id     = "expire-noncurrent-versions"
      status = "Enabled"
      filter {}
      noncurrent_version_expiration {
        noncurrent_days = rule.value
      }
    }
  }
}

# Access logs of the data buckets (S3 server access logging writes with SSE-S3 only).
resource "aws_s3_bucket" "logs" {
  #checkov:skip=CKV_AWS_18:This is the access-log bucket; logging it into itself would loop.
  #checkov:skip=CKV_AWS_144:Access logs are not replicated across regions.
  #checkov:skip=CKV2_AWS_62:Nothing consumes events of the access logs.
  #checkov:skip=CKV_AWS_145:S3 server access logging delivers only to SSE-S3 buckets, not SSE-KMS.
  bucket = "${var.name}-access-logs"
}

resource "aws_s3_bucket_versioning" "logs" {
  bucket = aws_s3_bucket.logs.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "logs" {
  bucket = aws_s3_bucket.logs.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_public_access_block" "logs" {
  bucket                  = aws_s3_bucket.logs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_lifecycle_configuration" "logs" {
  bucket     = aws_s3_bucket.logs.id
  depends_on = [aws_s3_bucket_versioning.logs]
  rule {
    id     = "expire-logs"
    status = "Enabled"
    filter {}
    expiration {
      days = 90
    }
    noncurrent_version_expiration {
      noncurrent_days = 7
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

resource "aws_s3_bucket_policy" "logs" {
  bucket     = aws_s3_bucket.logs.id
  policy     = data.aws_iam_policy_document.logs.json
  depends_on = [aws_s3_bucket_public_access_block.logs]
}

data "aws_iam_policy_document" "logs" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    resources = [aws_s3_bucket.logs.arn, "${aws_s3_bucket.logs.arn}/*"]
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
  statement {
    sid     = "S3ServerAccessLogs"
    effect  = "Allow"
    actions = ["s3:PutObject"]
    principals {
      type        = "Service"
      identifiers = ["logging.s3.amazonaws.com"]
    }
    resources = ["${aws_s3_bucket.logs.arn}/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [var.account_id]
    }
  }
}

resource "aws_s3_bucket_logging" "data" {
  for_each      = local.buckets
  bucket        = aws_s3_bucket.data[each.key].id
  target_bucket = aws_s3_bucket.logs.id
  target_prefix = "${each.key}/"
}
