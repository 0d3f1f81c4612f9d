output "role_arn" {
  description = "IAM role for the worker's service account (Helm value serviceAccount.roleArn)."
  value       = aws_iam_role.worker.arn
}

output "queue_urls" {
  description = "URLs of the tenant queues, by kind."
  value       = { for k, q in aws_sqs_queue.tenant : k => q.url }
}

output "results_queue_url" {
  description = "URL of the results queue (Helm value resultsQueue)."
  value       = aws_sqs_queue.results.url
}

output "dead_letter_queue_urls" {
  description = "URLs of the dead-letter queues, by kind."
  value       = { for k, q in aws_sqs_queue.dead_letter : k => q.url }
}
