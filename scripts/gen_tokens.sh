#!/usr/bin/env bash
# Writes the three tokens a hand-started Tessel cluster needs into DIR (made
# mode 0700; files mode 0600, 32 random bytes base64 each), keeping any that
# exist (delete DIR to start over):
#   DIR/admin.token    operators (tesselctl --token_file); the registry's and
#                      the servers' --admin_token_file
#   DIR/worker.token   workers (--token_file, TESSEL_TOKEN_FILE); the registry's
#                      and the servers' --worker_token_file
#   DIR/server.token   shard servers (--token_file); the registry's
#                      --server_token_file
# Usage: scripts/gen_tokens.sh DIR      (docs/security.md)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
for role in admin worker server; do
  f="$dir/$role.token"
  if [ -s "$f" ]; then
    echo "kept  $f"
  else
    head -c 32 /dev/urandom | base64 | tr -d '\n' > "$f"
    echo >> "$f"
    echo "wrote $f"
  fi
  chmod 600 "$f"
done
