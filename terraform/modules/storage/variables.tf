variable "name" {
  description = "Name prefix of the buckets and the key."
  type        = string
}

variable "account_id" {
  description = "The AWS account that owns the key."
  type        = string
}

variable "region" {
  description = "The AWS region of the key and the log groups it encrypts."
  type        = string
}

variable "log_group_prefixes" {
  description = "Name prefixes of the log groups CloudWatch Logs may encrypt with the key."
  type        = list(string)
}

variable "savepoint_max_age_days" {
  description = "Days a deleted savepoint object stays recoverable as a noncurrent version."
  type        = number
}

variable "archive_retention_days" {
  description = "Days archived input is kept."
  type        = number
}

variable "warehouse_version_retention_days" {
  description = "Days a replaced warehouse object stays as a noncurrent version."
  type        = number
}
