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
