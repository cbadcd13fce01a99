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
    region                           = "us-east-1"
    log_group_prefixes               = ["/aws/eks/streamwarden-test/"]
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

run "cloudwatch_logs_may_use_the_platform_key_for_the_platforms_log_groups_only" {
  command = plan

  module {
    source = "./modules/storage"
  }

  variables {
    name                             = "streamwarden-test"
    account_id                       = "123456789012"
    region                           = "eu-west-1"
    log_group_prefixes               = ["/aws/eks/streamwarden-test/", "/aws/rds/instance/streamwarden-test/"]
    savepoint_max_age_days           = 7
    archive_retention_days           = 30
    warehouse_version_retention_days = 30
  }

  # The EKS control-plane log group is created with this key: without the grant, its creation fails.
  assert {
    condition = [
      for statement in jsondecode(aws_kms_key.platform.policy).Statement : {
        effect    = statement.Effect
        actions   = toset(statement.Action)
        log_group = statement.Condition.ArnLike["kms:EncryptionContext:aws:logs:arn"]
      } if try(statement.Principal.Service, "") == "logs.eu-west-1.amazonaws.com"
      ] == [{
        effect  = "Allow"
        actions = toset(["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"])
        log_group = [
          "arn:aws:logs:eu-west-1:123456789012:log-group:/aws/eks/streamwarden-test/*",
          "arn:aws:logs:eu-west-1:123456789012:log-group:/aws/rds/instance/streamwarden-test/*",
        ]
    }]
    error_message = "the key policy lets CloudWatch Logs of the region use the key, for the platform's log groups only"
  }
}

run "the_platforms_log_groups_are_the_ones_the_key_admits" {
  command = plan

  assert {
    condition     = startswith(module.compute.log_group_name, "/aws/eks/streamwarden-test/")
    error_message = "the EKS log group is under a prefix the key policy admits"
  }
}

run "the_platforms_postgresql_is_private_encrypted_and_reached_from_the_cluster_only" {
  command = apply

  assert {
    condition     = module.database.instance.engine == "postgres" && module.database.instance.engine_version == "18"
    error_message = "one PostgreSQL 18 instance, the major version the compose stack and the tests run"
  }
  assert {
    condition     = module.database.instance.storage_encrypted && module.database.instance.kms_key_id == module.storage.kms_key_arn
    error_message = "the database is encrypted with the platform key"
  }
  assert {
    condition     = !module.database.instance.publicly_accessible && module.database.instance.deletion_protection
    error_message = "the database is private and protected from deletion"
  }
  assert {
    condition     = module.database.instance.subnet_ids == toset(var.private_subnet_ids)
    error_message = "the database's subnet group is the private subnets"
  }
  assert {
    condition = module.database.instance.ingress == [{
      from_port = 5432, to_port = 5432, security_groups = toset([module.compute.cluster_security_group_id])
    }]
    error_message = "only the EKS cluster's security group reaches PostgreSQL, on 5432 only"
  }
}

run "every_secret_the_platform_reads_exists_without_a_value" {
  command = plan

  assert {
    condition = module.secrets.secret_names == {
      slack_webhook_url     = "streamwarden-test/slack-webhook-url"
      airflow_db_password   = "streamwarden-test/airflow-db-password"
      ledger_db_password    = "streamwarden-test/ledger-db-password"
      metastore_db_password = "streamwarden-test/metastore-db-password"
      views_db_password     = "streamwarden-test/views-db-password"
    }
    error_message = "one secret per file the platform and Airflow read, named after it"
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
    bucket_arns = {
      checkpoints = "arn:aws:s3:::streamwarden-test-checkpoints"
      savepoints  = "arn:aws:s3:::streamwarden-test-savepoints"
      archive     = "arn:aws:s3:::streamwarden-test-archive"
      warehouse   = "arn:aws:s3:::streamwarden-test-warehouse"
    }
    kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    secret_arns = [
      "arn:aws:secretsmanager:us-east-1:123456789012:secret:streamwarden-test/slack-webhook-url",
      "arn:aws:secretsmanager:us-east-1:123456789012:secret:streamwarden-test/metastore-db-password",
    ]
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
        for action in statement.actions : !startswith(action, "secretsmanager:")
      ])
    ])
    error_message = "the driver role reads no secret"
  }
  assert {
    condition = anytrue([
      for statement in data.aws_iam_policy_document.orchestrator.statement :
      contains(tolist(statement.actions), "secretsmanager:GetSecretValue") && statement.resources == toset(var.secret_arns)
    ])
    error_message = "the orchestrator reads exactly the platform's secrets"
  }
  assert {
    condition = alltrue(flatten([
      for document in [data.aws_iam_policy_document.driver, data.aws_iam_policy_document.orchestrator] : [
        for statement in document.statement : [for action in statement.actions : !startswith(action, "glue:")]
      ]
    ]))
    error_message = "no role holds a Glue permission: the warehouse's catalog is the Hive metastore in PostgreSQL"
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
