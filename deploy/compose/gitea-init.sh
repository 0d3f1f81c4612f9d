#!/bin/sh
# Creates the Gitea admin user and the worker's access token. The token may
# only read and write repositories (scope write:repository) and goes to
# $SECRETS_DIR/git-token, the one file the worker reads. Creating the
# repository needs more (POST /api/v1/user/repos requires write:user), so the
# admin's one-time password goes to $SETUP_DIR, a volume only the init steps
# mount, and init.sh deletes it once the repository exists. Idempotent.
set -eu
export GITEA_WORK_DIR="${GITEA_WORK_DIR:-/data/gitea}"
SECRETS_DIR="${SECRETS_DIR:-/secrets}"
SETUP_DIR="${SETUP_DIR:-/setup}"
GITEA_ADMIN="${GITEA_ADMIN:-admin}"
if [ -s "$SECRETS_DIR/git-token" ]; then exit 0; fi
umask 077
password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
if gitea admin user list --admin | awk 'NR > 1 { print $2 }' | grep -qx "$GITEA_ADMIN"; then
  gitea admin user change-password --username "$GITEA_ADMIN" --password "$password" --must-change-password=false >/dev/null
else
  gitea admin user create --admin --username "$GITEA_ADMIN" --email "$GITEA_ADMIN@example.com" \
    --password "$password" --must-change-password=false >/dev/null
fi
printf '%s' "$password" > "$SETUP_DIR/admin-password"
gitea admin user generate-access-token --username "$GITEA_ADMIN" --token-name "tenant-worker-$(date +%s)" \
  --scopes write:repository --raw | tail -n 1 > "$SECRETS_DIR/git-token.tmp"
chmod 0400 "$SECRETS_DIR/git-token.tmp"
mv "$SECRETS_DIR/git-token.tmp" "$SECRETS_DIR/git-token"
