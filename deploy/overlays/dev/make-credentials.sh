#!/usr/bin/env bash
# Writes the dev overlay's bearer tokens into credentials/ beside this
# script, which kustomization.yaml's secretGenerator turns into the Secrets
# tessel-admin-token, tessel-worker-token and tessel-server-token:
#   credentials/admin-token   the admin role (give it to tesselctl --token_file)
#   credentials/worker-token  the workers' token
#   credentials/server-token  the shard servers' token for the registry
# Each is 32 random bytes in base64 (44 characters, one line). Idempotent:
# a token file already there is kept (checked: one token of at least 16
# characters, the three different), so re-running it changes nothing; to
# rotate, delete the files and run it again. The folder is 0700 and the files
# 0600 (umask 077), as tesselctl requires of a token file its user owns.
#
# Usage: deploy/overlays/dev/make-credentials.sh   (from any directory)
set -euo pipefail
umask 077

if [[ $# -ne 0 ]]; then
  echo "usage: $0 (no arguments: writes $(dirname "$0")/credentials/)" >&2
  exit 2
fi
dir="$(cd "$(dirname "$0")" && pwd)/credentials"
mkdir -p "$dir"
chmod 700 "$dir"

declare -A seen=()
tmp=""
trap 'rm -f "$tmp"' EXIT
for role in admin worker server; do
  file="$dir/$role-token"
  if [[ -e $file ]]; then
    # The token a Tessel binary would read: the first field of the first
    # line that is neither blank nor a '#' comment.
    token="$(awk '!/^[[:space:]]*(#|$)/ { print $1; exit }' "$file")"
    if [[ ${#token} -lt 16 ]]; then
      echo "$0: $file holds no token of at least 16 characters; delete it and run again" >&2
      exit 1
    fi
    if [[ -n ${seen[$token]:-} ]]; then
      echo "$0: $file holds the same token as ${seen[$token]}: each role needs its own;" \
        "delete one and run again" >&2
      exit 1
    fi
    chmod 600 "$file"
    echo "kept    $file"
  else
    tmp="$(mktemp "$dir/.$role-token.XXXXXX")"
    head -c 32 /dev/urandom | base64 >"$tmp"
    mv "$tmp" "$file"
    token="$(cat "$file")"
    echo "wrote   $file"
  fi
  seen[$token]="$file"
done
