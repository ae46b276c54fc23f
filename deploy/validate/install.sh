#!/usr/bin/env bash
# Installs the npm packages of k8s_validate.js (kubernetes-models and
# @kubernetes-models/prometheus-operator, pinned
# with every dependency by package-lock.json) into DIR, default
# /var/cache/tessel-npm (env TESSEL_NPM_DIR), from the npm registry, so that
# validation runs offline afterwards. Needs node and npm: when they are
# missing, installs Debian's nodejs and npm packages (as root).
# Idempotent: does nothing when DIR already holds this lock file's packages.
#
#   deploy/validate/install.sh [DIR]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${TESSEL_NPM_DIR:-/var/cache/tessel-npm}}
stamp="$dir/.lock-$(sha256sum "$here/package-lock.json" | cut -c1-16)"

if [ -f "$stamp" ] && [ -f "$dir/node_modules/kubernetes-models/package.json" ] &&
  [ -f "$dir/node_modules/@kubernetes-models/prometheus-operator/package.json" ]; then
  echo "validate/install: kubernetes-models present in $dir"
  exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "validate/install: node and npm missing; run as root to install Debian's nodejs and npm" >&2
    exit 1
  fi
  echo "validate/install: installing Debian's nodejs and npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends nodejs npm
fi
mkdir -p "$dir"
cp "$here/package.json" "$here/package-lock.json" "$dir/"
rm -f "$dir"/.lock-*
echo "validate/install: npm ci into $dir"
(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
touch "$stamp"
