# The Glue Data Catalog database of the warehouse tables (`warehouse.<job>`): the team
# deployment's metastore, read by Spark, Athena and Trino alike.
resource "aws_glue_catalog_database" "warehouse" {
  name         = replace("${var.name}_warehouse", "-", "_")
  description  = "Streamwarden warehouse tables, one per job, published by compaction"
  location_uri = "s3://${var.warehouse_bucket}/tables/"
}
