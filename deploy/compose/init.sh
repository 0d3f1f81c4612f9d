#!/bin/sh
# Creates the three queues with dead-letter queues (redrive after 5
# receives), the results queue, and the GitOps repository seeded from
# templates/. The repository is created with the admin's one-time password
# (the worker's token may not create repositories) and pushed with the
# worker's token; the password file is deleted afterwards. Idempotent.
set -eu
command -v aws >/dev/null && command -v git >/dev/null && command -v curl >/dev/null ||
  apk add --no-cache aws-cli git curl >/dev/null
SETUP_DIR="${SETUP_DIR:-/setup}"
TEMPLATES_DIR="${TEMPLATES_DIR:-/templates}"
GITEA_ADMIN="${GITEA_ADMIN:-admin}"
token=$(cat "$GIT_TOKEN_FILE")
# AWS_ENDPOINT_URL (LocalStack) as a flag too: version 1 of the CLI ignores
# the variable.
sqs() { aws ${AWS_ENDPOINT_URL:+--endpoint-url "$AWS_ENDPOINT_URL"} sqs "$@"; }

for q in argoworkflows-onboarding-queue argoworkflows-offboarding-queue argoworkflows-deployment-queue; do
  dlq_url=$(sqs create-queue --queue-name "$q-dlq" --query QueueUrl --output text)
  dlq_arn=$(sqs get-queue-attributes --queue-url "$dlq_url" --attribute-names QueueArn --query Attributes.QueueArn --output text)
  sqs create-queue --queue-name "$q" \
    --attributes "{\"RedrivePolicy\":\"{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":\\\"5\\\"}\",\"VisibilityTimeout\":\"30\"}" >/dev/null
done

sqs create-queue --queue-name tenant-worker-results >/dev/null

# Credentials go in headers (curl reads them from stdin), never in a URL, a
# command line or a remote's config.
auth="Authorization: token $token"
repo="$GITEA_URL/api/v1/repos/$GITEA_ADMIN/eks-saas-gitops"
if ! printf 'header = "%s"\n' "$auth" | curl -sf -K - "$repo" >/dev/null; then
  password=$(cat "$SETUP_DIR/admin-password")
  printf 'user = "%s:%s"\n' "$GITEA_ADMIN" "$password" |
    curl -sf -K - -H 'Content-Type: application/json' -X POST "$GITEA_URL/api/v1/user/repos" \
      -d '{"name":"eks-saas-gitops","default_branch":"main","private":true}' >/dev/null
  work=$(mktemp -d)
  cp -r "$TEMPLATES_DIR/application-plane" "$work/"
  cd "$work"
  git init -q -b main
  git add -A
  git -c user.name="$GITEA_ADMIN" -c user.email="$GITEA_ADMIN@example.com" commit -qm "Initial GitOps tree"
  GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader GIT_CONFIG_VALUE_0="$auth" \
    git push -q "$GITEA_URL/$GITEA_ADMIN/eks-saas-gitops.git" main
  cd /
  rm -rf "$work"
fi
# The SSH variant (docker-compose.ssh.yaml): a deploy key with write access
# for the worker, and known_hosts pinning Gitea's SSH host key as read now,
# at setup, on the compose network.
if [ -n "${GIT_SSH_KEY_FILE:-}" ] && [ ! -s "$GIT_SSH_KEY_FILE" ]; then
  command -v ssh-keygen >/dev/null || apk add --no-cache openssh-keygen openssh-client >/dev/null
  password=$(cat "$SETUP_DIR/admin-password")
  ssh-keygen -q -t ed25519 -N "" -C tenant-worker -f "$GIT_SSH_KEY_FILE.new"
  printf 'user = "%s:%s"\n' "$GITEA_ADMIN" "$password" |
    curl -sf -K - -H 'Content-Type: application/json' -X POST "$repo/keys" \
      -d "{\"title\":\"tenant-worker\",\"key\":\"$(cat "$GIT_SSH_KEY_FILE.new.pub")\",\"read_only\":false}" >/dev/null
  ssh-keyscan -p "${GITEA_SSH_PORT:-22}" "${GITEA_SSH_HOST:-gitea}" 2>/dev/null > "$GIT_KNOWN_HOSTS_FILE.new"
  [ -s "$GIT_KNOWN_HOSTS_FILE.new" ]
  mv "$GIT_KNOWN_HOSTS_FILE.new" "$GIT_KNOWN_HOSTS_FILE"
  mv "$GIT_SSH_KEY_FILE.new" "$GIT_SSH_KEY_FILE"
  rm -f "$GIT_SSH_KEY_FILE.new.pub"
fi
rm -f "$SETUP_DIR/admin-password"
echo "queues and repository ready"
