# The three tenant queues, each with a dead-letter queue and a redrive
# policy, and the IRSA role of the worker with the policy of deploy/iam.

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

locals {
  queues = {
    onboarding  = var.onboarding_queue_name
    offboarding = var.offboarding_queue_name
    deployment  = var.deployment_queue_name
  }
  oidc_issuer = trimprefix(var.cluster_oidc_issuer_url, "https://")
}

resource "aws_sqs_queue" "dead_letter" {
  for_each                  = local.queues
  name                      = "${each.value}-dlq"
  message_retention_seconds = var.dead_letter_retention_seconds
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

resource "aws_sqs_queue" "tenant" {
  for_each                   = local.queues
  name                       = each.value
  visibility_timeout_seconds = var.visibility_timeout_seconds
  receive_wait_time_seconds  = 20
  sqs_managed_sse_enabled    = true
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dead_letter[each.key].arn
    maxReceiveCount     = var.max_receive_count
  })
  tags = var.tags
}

# Only the tenant queues may move messages into the dead-letter queues.
resource "aws_sqs_queue_redrive_allow_policy" "dead_letter" {
  for_each  = local.queues
  queue_url = aws_sqs_queue.dead_letter[each.key].id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.tenant[each.key].arn]
  })
}

# One result event per finished message (RESULTS_QUEUE), for onboarding
# services and `tenant-worker send --wait`.
resource "aws_sqs_queue" "results" {
  name                      = var.results_queue_name
  message_retention_seconds = 86400
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRoleWithWebIdentity"]
    principals {
      type        = "Federated"
      identifiers = [var.cluster_oidc_provider_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:sub"
      values   = ["system:serviceaccount:${var.namespace}:${var.service_account}"]
    }
    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "worker" {
  name               = var.role_name
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "worker" {
  name = "tenant-queues"
  role = aws_iam_role.worker.id
  policy = templatefile("${path.module}/../iam/policy.json", {
    region            = data.aws_region.current.name
    account_id        = data.aws_caller_identity.current.account_id
    onboarding_queue  = aws_sqs_queue.tenant["onboarding"].name
    offboarding_queue = aws_sqs_queue.tenant["offboarding"].name
    deployment_queue  = aws_sqs_queue.tenant["deployment"].name
    results_queue     = aws_sqs_queue.results.name
  })
}
