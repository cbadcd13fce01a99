# `terraform test` with a mocked AWS provider: plans and applies the whole configuration offline and
# checks what the modules promise. Mocked data sources return the values given here.
mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "123456789012"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_resource "aws_eks_cluster" {
    defaults = {
      arn = "arn:aws:eks:us-east-1:123456789012:cluster/streamwarden-test"
    }
  }
  mock_resource "aws_iam_openid_connect_provider" {
    defaults = {
      arn = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::123456789012:role/streamwarden-test"
    }
  }
  mock_resource "aws_kms_key" {
    defaults = {
      arn = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    }
  }
  mock_resource "aws_secretsmanager_secret" {
    defaults = {
      arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:streamwarden-test/slack-webhook-url"
    }
  }
  mock_resource "aws_ecr_repository" {
    defaults = {
      arn = "arn:aws:ecr:us-east-1:123456789012:repository/streamwarden-test"
    }
  }
}

variables {
  environment        = "test"
  vpc_id             = "vpc-0123456789abcdef0"
  private_subnet_ids = ["subnet-0000000000000000a", "subnet-0000000000000000b"]
  ci_repository      = "example/streamwarden"
}

run "buckets_are_encrypted_private_and_versioned_where_it_protects_data" {
  command = apply

  assert {
    condition     = toset(keys(module.storage.bucket_names)) == toset(["checkpoints", "savepoints", "archive", "warehouse"])
    error_message = "one bucket per purpose"
  }
  assert {
    condition     = alltrue([for name in values(module.storage.bucket_names) : startswith(name, "streamwarden-test-")])
    error_message = "bucket names carry the environment"
  }
  assert {
    condition = alltrue([
      for config in module.storage.encryption : config.sse_algorithm == "aws:kms" && config.bucket_key_enabled
    ])
    error_message = "every data bucket is SSE-KMS with bucket keys"
  }
  assert {
    condition = alltrue([
      for block in module.storage.public_access_blocks : block.block_public_acls && block.block_public_policy && block.ignore_public_acls && block.restrict_public_buckets
    ])
    error_message = "public access is blocked on every bucket"
  }
  assert {
    condition = module.storage.versioning == {
      checkpoints = "Suspended", savepoints = "Enabled", archive = "Enabled", warehouse = "Enabled"
    }
    error_message = "versioning protects savepoints, the archive and the warehouse; checkpoints churn"
  }
}

run "lifecycle_rules_follow_the_retention_settings" {
  command = plan

  variables {
    savepoint_max_age_days           = 9
    archive_retention_days           = 45
    warehouse_version_retention_days = 20
  }

  assert {
    condition     = module.storage.lifecycle_days.savepoints == { expire_current = null, expire_noncurrent = 9 }
    error_message = "a deleted savepoint stays recoverable for savepoint_max_age_days and current ones never expire by age"
  }
  assert {
    condition     = module.storage.lifecycle_days.archive.expire_current == 45
    error_message = "archived input expires after archive_retention_days"
  }
  assert {
    condition     = module.storage.lifecycle_days.warehouse == { expire_current = null, expire_noncurrent = 20 }
    error_message = "replaced warehouse versions expire after warehouse_version_retention_days"
  }
}

run "roles_are_scoped_to_their_holders" {
  command = plan

  assert {
    condition     = toset(keys(module.iam.role_arns)) == toset(["driver", "orchestrator", "ci"])
    error_message = "one role per holder"
  }
  assert {
    condition     = module.iam.pod_identity_service_accounts == { driver = "spark-driver", orchestrator = "airflow" }
    error_message = "each pod role is bound to one service account"
  }
}

run "environment_names_are_validated" {
  command = plan

  variables {
    environment = "Prod_1"
  }

  expect_failures = [var.environment]
}

run "two_subnets_are_required" {
  command = plan

  variables {
    private_subnet_ids = ["subnet-0000000000000000a"]
  }

  expect_failures = [var.private_subnet_ids]
}

run "every_bucket_refuses_requests_without_tls" {
  command = plan

  module {
    source = "./modules/storage"
  }

  variables {
    name                             = "streamwarden-test"
    account_id                       = "123456789012"
    savepoint_max_age_days           = 7
    archive_retention_days           = 30
    warehouse_version_retention_days = 30
  }

  assert {
    condition = alltrue([
      for document in data.aws_iam_policy_document.tls_only : (
        one(document.statement).effect == "Deny"
        && one(document.statement).actions == toset(["s3:*"])
        && one(one(document.statement).condition).variable == "aws:SecureTransport"
        && one(one(document.statement).condition).values == tolist(["false"])
      )
    ])
    error_message = "each data bucket's policy denies every request that is not TLS"
  }
  assert {
    condition     = length(data.aws_iam_policy_document.tls_only) == 4 && length(aws_s3_bucket_policy.tls_only) == 4
    error_message = "all four data buckets carry the TLS-only policy"
  }
  assert {
    condition     = aws_kms_key.platform.enable_key_rotation
    error_message = "the platform key rotates"
  }
}

run "roles_hold_only_what_their_holder_does" {
  command = plan

  module {
    source = "./modules/iam"
  }

  variables {
    name       = "streamwarden-test"
    account_id = "123456789012"
    region     = "us-east-1"
    bucket_arns = {
      checkpoints = "arn:aws:s3:::streamwarden-test-checkpoints"
      savepoints  = "arn:aws:s3:::streamwarden-test-savepoints"
      archive     = "arn:aws:s3:::streamwarden-test-archive"
      warehouse   = "arn:aws:s3:::streamwarden-test-warehouse"
    }
    kms_key_arn          = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    glue_database_name   = "streamwarden_test_warehouse"
    slack_secret_arn     = "arn:aws:secretsmanager:us-east-1:123456789012:secret:streamwarden-test/slack-webhook-url"
    cluster_name         = "streamwarden-test"
    cluster_arn          = "arn:aws:eks:us-east-1:123456789012:cluster/streamwarden-test"
    ecr_repository_arn   = "arn:aws:ecr:us-east-1:123456789012:repository/streamwarden-test"
    ci_repository        = "example/streamwarden"
    kubernetes_namespace = "streamwarden"
  }

  # A driver writes only its checkpoints and the warehouse; savepoints and the archive it reads.
  assert {
    condition = alltrue(flatten([
      for statement in data.aws_iam_policy_document.driver.statement : [
        for resource in statement.resources : !(startswith(resource, "arn:aws:s3:::streamwarden-test-savepoints/") || startswith(resource, "arn:aws:s3:::streamwarden-test-archive/"))
        || length(setintersection(statement.actions, toset(["s3:PutObject", "s3:DeleteObject"]))) == 0
      ]
    ]))
    error_message = "the driver role cannot write savepoints or the archive"
  }
  assert {
    condition = alltrue([
      for statement in data.aws_iam_policy_document.driver.statement : alltrue([
        for action in statement.actions : !startswith(action, "secretsmanager:") && !startswith(action, "glue:Create") && !startswith(action, "glue:Update")
      ])
    ])
    error_message = "the driver role neither reads the Slack secret nor publishes catalog partitions"
  }
  assert {
    condition = anytrue([
      for statement in data.aws_iam_policy_document.orchestrator.statement :
      contains(tolist(statement.actions), "secretsmanager:GetSecretValue") && statement.resources == toset([var.slack_secret_arn])
    ])
    error_message = "the orchestrator reads exactly the Slack secret"
  }
  assert {
    condition = alltrue([
      for statement in data.aws_iam_policy_document.ci.statement : alltrue([for action in statement.actions : startswith(action, "ecr:")])
    ])
    error_message = "CI may only push the image"
  }
  assert {
    condition = alltrue([
      for statement in data.aws_iam_policy_document.ci_trust.statement : anytrue([
        for condition in statement.condition : condition.variable == "token.actions.githubusercontent.com:sub" && condition.values == tolist(["repo:example/streamwarden:ref:refs/heads/main"])
      ])
    ])
    error_message = "only the main branch of the CI repository assumes the CI role"
  }
}
