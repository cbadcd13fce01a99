# Three roles, each with only what its holder does:
# - driver: the pods of the Spark workers, where executors run (service account spark-driver):
#   checkpoints, reads of the archive and savepoints, writes of warehouse data.
# - orchestrator: Airflow's components and tasks (service account airflow): the supervisor copies
#   checkpoints into savepoints and back (rewind), archives input, publishes compacted partitions,
#   and its pods mount the platform's secrets (the Slack webhook, the database passwords).
# - ci: GitHub Actions of the main branch push the image.
# Pods get their role through EKS Pod Identity, so no long-lived key exists anywhere. The
# warehouse's catalog is the Hive metastore in PostgreSQL (modules/database), not Glue: no role
# holds a Glue permission.
locals {
  s3_read  = ["s3:GetObject", "s3:GetObjectVersion"]
  s3_write = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
  kms_use  = ["kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"]
}

data "aws_iam_policy_document" "pod_identity_trust" {
  statement {
    actions = ["sts:AssumeRole", "sts:TagSession"]
    principals {
      type        = "Service"
      identifiers = ["pods.eks.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [var.account_id]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [var.cluster_arn]
    }
  }
}

resource "aws_iam_role" "driver" {
  name               = "${var.name}-driver"
  assume_role_policy = data.aws_iam_policy_document.pod_identity_trust.json
}

data "aws_iam_policy_document" "driver" {
  statement {
    sid       = "ListOwnBuckets"
    actions   = ["s3:ListBucket"]
    resources = [for purpose in ["checkpoints", "archive", "savepoints", "warehouse"] : var.bucket_arns[purpose]]
  }
  statement {
    sid       = "CheckpointsAndWarehouseReadWrite"
    actions   = concat(local.s3_read, local.s3_write)
    resources = ["${var.bucket_arns["checkpoints"]}/*", "${var.bucket_arns["warehouse"]}/*"]
  }
  statement {
    sid       = "ArchiveAndSavepointsRead"
    actions   = local.s3_read
    resources = ["${var.bucket_arns["archive"]}/*", "${var.bucket_arns["savepoints"]}/*"]
  }
  statement {
    sid       = "Encryption"
    actions   = local.kms_use
    resources = [var.kms_key_arn]
  }
}

resource "aws_iam_role_policy" "driver" {
  name   = "streamwarden-driver"
  role   = aws_iam_role.driver.id
  policy = data.aws_iam_policy_document.driver.json
}

resource "aws_iam_role" "orchestrator" {
  name               = "${var.name}-orchestrator"
  assume_role_policy = data.aws_iam_policy_document.pod_identity_trust.json
}

data "aws_iam_policy_document" "orchestrator" {
  statement {
    sid       = "ListPlatformBuckets"
    actions   = ["s3:ListBucket", "s3:ListBucketVersions"]
    resources = values(var.bucket_arns)
  }
  statement {
    sid       = "PlatformObjects"
    actions   = concat(local.s3_read, local.s3_write)
    resources = [for arn in values(var.bucket_arns) : "${arn}/*"]
  }
  statement {
    sid       = "PlatformSecrets"
    actions   = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
    resources = var.secret_arns
  }
  statement {
    sid       = "Encryption"
    actions   = local.kms_use
    resources = [var.kms_key_arn]
  }
}

resource "aws_iam_role_policy" "orchestrator" {
  name   = "streamwarden-orchestrator"
  role   = aws_iam_role.orchestrator.id
  policy = data.aws_iam_policy_document.orchestrator.json
}

resource "aws_eks_pod_identity_association" "driver" {
  cluster_name    = var.cluster_name
  namespace       = var.kubernetes_namespace
  service_account = "spark-driver"
  role_arn        = aws_iam_role.driver.arn
}

resource "aws_eks_pod_identity_association" "orchestrator" {
  cluster_name    = var.cluster_name
  namespace       = var.kubernetes_namespace
  service_account = "airflow"
  role_arn        = aws_iam_role.orchestrator.arn
}

resource "aws_iam_openid_connect_provider" "github" {
  url            = "https://token.actions.githubusercontent.com"
  client_id_list = ["sts.amazonaws.com"]
}

data "aws_iam_policy_document" "ci_trust" {
  statement {
    actions = ["sts:AssumeRoleWithWebIdentity"]
    principals {
      type        = "Federated"
      identifiers = [aws_iam_openid_connect_provider.github.arn]
    }
    condition {
      test     = "StringEquals"
      variable = "token.actions.githubusercontent.com:aud"
      values   = ["sts.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "token.actions.githubusercontent.com:sub"
      values   = ["repo:${var.ci_repository}:ref:refs/heads/main"]
    }
  }
}

resource "aws_iam_role" "ci" {
  name               = "${var.name}-ci"
  assume_role_policy = data.aws_iam_policy_document.ci_trust.json
}

data "aws_iam_policy_document" "ci" {
  statement {
    sid = "EcrLogin"
    # GetAuthorizationToken has no resource to scope it to.
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"]
  }
  statement {
    sid = "PushTheImage"
    actions = [
      "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:CompleteLayerUpload",
      "ecr:InitiateLayerUpload", "ecr:PutImage", "ecr:UploadLayerPart",
    ]
    resources = [var.ecr_repository_arn]
  }
}

resource "aws_iam_role_policy" "ci" {
  name   = "streamwarden-ci"
  role   = aws_iam_role.ci.id
  policy = data.aws_iam_policy_document.ci.json
}
