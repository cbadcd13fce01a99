variable "name" {
  description = "Name prefix of the database."
  type        = string
}

variable "warehouse_bucket" {
  description = "The bucket the tables' data lives in."
  type        = string
}
