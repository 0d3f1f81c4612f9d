#!/bin/sh
# Creates the three queues with dead-letter queues (redrive after 5
# receives), the results queue, and the GitOps repository seeded from
# templates/. Idempotent.
set -eu
apk add --no-cache aws-cli git curl >/dev/null
token=$(cat "$GIT_TOKEN_FILE")

for q in argoworkflows-onboarding-queue argoworkflows-offboarding-queue argoworkflows-deployment-queue; do
  dlq_url=$(aws sqs create-queue --queue-name "$q-dlq" --query QueueUrl --output text)
  dlq_arn=$(aws sqs get-queue-attributes --queue-url "$dlq_url" --attribute-names QueueArn --query Attributes.QueueArn --output text)
  aws sqs create-queue --queue-name "$q" \
    --attributes "{\"RedrivePolicy\":\"{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":\\\"5\\\"}\",\"VisibilityTimeout\":\"30\"}" >/dev/null
done

aws sqs create-queue --queue-name tenant-worker-results >/dev/null

# The token goes in a header, never in a URL or a remote's config.
auth="Authorization: token $token"
if ! curl -sf -H "$auth" "$GITEA_URL/api/v1/repos/admin/eks-saas-gitops" >/dev/null; then
  curl -sf -H "$auth" -H 'Content-Type: application/json' -X POST "$GITEA_URL/api/v1/user/repos" \
    -d '{"name":"eks-saas-gitops","default_branch":"main","private":true}' >/dev/null
  work=$(mktemp -d)
  cp -r /templates/application-plane "$work/"
  cd "$work"
  git init -q -b main
  git add -A
  git -c user.name=admin -c user.email=admin@example.com commit -qm "Initial GitOps tree"
  git -c "http.extraHeader=$auth" push -q "$GITEA_URL/admin/eks-saas-gitops.git" main
fi
echo "queues and repository ready"
