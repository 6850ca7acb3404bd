#!/usr/bin/env bash
# Checks that the JavaScript SDK's checked-in build (sdk/js/dist: agent.js, agent.min.js and the
# TypeScript declarations in types/) is the build of sdk/js/src: TypeScript checks the sources,
# then the build is made again with the locked esbuild and tsc (`npm ci` first where node_modules
# is missing or older than package-lock.json) into a temporary directory and compared. scripts/test
# runs it; it takes a few seconds once node_modules is there.
set -euo pipefail
cd "$(dirname "$0")/../sdk/js"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "scripts/sdk_build_check.sh: node or npm missing: the SDK's build is not checked" >&2
  case "${CI:-}" in ""|0|false|no) exit 0 ;; *) exit 1 ;; esac
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
npm run --silent typecheck
SDK_OUT="$out" npm run --silent bundle
if ! diff -r -q "$out" dist >/dev/null; then
  echo "sdk/js/dist is not the build of sdk/js/src: run \`npm run build\` in sdk/js" >&2
  exit 1
fi
