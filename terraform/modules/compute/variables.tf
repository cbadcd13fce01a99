variable "name" {
  description = "Name of the cluster and prefix of its resources."
  type        = string
}

variable "vpc_id" {
  description = "The VPC of the cluster."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the control plane's interfaces and the nodes."
  type        = list(string)
}

variable "kms_key_arn" {
  description = "The key that encrypts Kubernetes secrets and the image repository."
  type        = string
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version."
  type        = string
}

variable "node_instance_types" {
  description = "Instance types of the node group."
  type        = list(string)
}

variable "node_count" {
  description = "Desired, minimum and maximum nodes."
  type        = object({ desired = number, min = number, max = number })
}
