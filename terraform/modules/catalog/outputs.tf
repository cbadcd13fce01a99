output "database_name" {
  description = "The Glue database name."
  value       = aws_glue_catalog_database.warehouse.name
}

output "database_arn" {
  description = "The Glue database ARN."
  value       = aws_glue_catalog_database.warehouse.arn
}
