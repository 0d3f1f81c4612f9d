#!/bin/sh
# Creates the Gitea admin user and a repository-scoped access token, and
# writes the token to /secrets/git-token. Idempotent.
set -eu
export GITEA_WORK_DIR=/data/gitea
if [ -s /secrets/git-token ]; then exit 0; fi
gitea admin user create --admin --username admin --email admin@example.com \
  --password "$(head -c 18 /dev/urandom | base64)" --must-change-password=false || true
gitea admin user generate-access-token --username admin --token-name tenant-worker \
  --scopes write:repository --raw > /secrets/git-token
chmod 0400 /secrets/git-token
