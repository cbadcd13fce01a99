output "role_arns" {
  description = "Role ARN by holder: driver, orchestrator, ci."
  value = {
    driver       = aws_iam_role.driver.arn
    orchestrator = aws_iam_role.orchestrator.arn
    ci           = aws_iam_role.ci.arn
  }
}

output "pod_identity_service_accounts" {
  description = "The Kubernetes service account each pod role is bound to."
  value = {
    driver       = aws_eks_pod_identity_association.driver.service_account
    orchestrator = aws_eks_pod_identity_association.orchestrator.service_account
  }
}
