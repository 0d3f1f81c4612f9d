variable "onboarding_queue_name" {
  description = "Name of the onboarding queue (the reference platform's name by default)."
  type        = string
  default     = "argoworkflows-onboarding-queue"
}

variable "offboarding_queue_name" {
  description = "Name of the offboarding queue."
  type        = string
  default     = "argoworkflows-offboarding-queue"
}

variable "deployment_queue_name" {
  description = "Name of the deployment queue."
  type        = string
  default     = "argoworkflows-deployment-queue"
}

variable "results_queue_name" {
  description = "Name of the queue the worker publishes one result event per finished message to (RESULTS_QUEUE)."
  type        = string
  default     = "tenant-worker-results"
}

variable "max_receive_count" {
  description = "Receives before SQS moves a message to its dead-letter queue."
  type        = number
  default     = 5
}

variable "visibility_timeout_seconds" {
  description = "Visibility timeout of the source queues; the worker extends it while it works."
  type        = number
  default     = 30
}

variable "dead_letter_retention_seconds" {
  description = "How long dead letters are kept (14 days, the SQS maximum)."
  type        = number
  default     = 1209600
}

variable "cluster_oidc_provider_arn" {
  description = "ARN of the EKS cluster's IAM OIDC provider (for IRSA)."
  type        = string
}

variable "cluster_oidc_issuer_url" {
  description = "Issuer URL of the EKS cluster's OIDC provider, with or without https://."
  type        = string
}

variable "namespace" {
  description = "Namespace the worker runs in."
  type        = string
  default     = "tenant-worker"
}

variable "service_account" {
  description = "Service account of the worker (the Helm release's full name by default)."
  type        = string
  default     = "tenant-worker"
}

variable "role_name" {
  description = "Name of the IAM role the worker assumes."
  type        = string
  default     = "tenant-worker"
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
