output "cluster_name" {
  description = "The EKS cluster name."
  value       = aws_eks_cluster.platform.name
}

output "cluster_arn" {
  description = "The EKS cluster ARN."
  value       = aws_eks_cluster.platform.arn
}

output "ecr_repository_arn" {
  description = "The image repository ARN."
  value       = aws_ecr_repository.image.arn
}

output "ecr_repository_url" {
  description = "The image repository URL."
  value       = aws_ecr_repository.image.repository_url
}

output "cluster_security_group_id" {
  description = "The security group EKS gives the control plane and the managed nodes."
  value       = one(aws_eks_cluster.platform.vpc_config[*].cluster_security_group_id)
}

output "log_group_name" {
  description = "The log group of the control-plane logs."
  value       = aws_cloudwatch_log_group.cluster.name
}
