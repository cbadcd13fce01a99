variable "name" {
  description = "Name prefix of the secret."
  type        = string
}

variable "kms_key_arn" {
  description = "The KMS key that encrypts the secret."
  type        = string
}
