variable "name" {
  description = "Name of the instance and prefix of its resources."
  type        = string
}

variable "vpc_id" {
  description = "The VPC of the instance."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets (two availability zones) of the instance's subnet group."
  type        = list(string)
}

variable "client_security_group_id" {
  description = "The security group whose members may connect: the EKS cluster's."
  type        = string
}

variable "kms_key_arn" {
  description = "The key of the storage, the master password secret, Performance Insights and the logs."
  type        = string
}

variable "engine_major_version" {
  description = "PostgreSQL major version (RDS picks its newest minor)."
  type        = string
}

variable "instance_class" {
  description = "RDS instance class."
  type        = string
}

variable "allocated_storage_gb" {
  description = "Initial storage; autoscaling may grow it to five times this."
  type        = number
}

variable "multi_az" {
  description = "A standby in a second availability zone."
  type        = bool
}
