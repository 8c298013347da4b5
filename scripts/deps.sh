#!/usr/bin/env bash
# Installs what `make demo` or `make test` needs and is missing, idempotently.
# Usage: scripts/deps.sh demo|test
# Debian packages come from apt-get (as root, or through sudo); without
# either it names the packages to install and fails.
set -euo pipefail

want=${1:-test}
missing=()

need_cmd() { # need_cmd COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}

have_postgres() {
  command -v postgres >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null
}

if ! command -v go >/dev/null 2>&1; then
  echo "deps: Go is not installed; install Go 1.26 or newer (https://go.dev/doc/install)" >&2
  exit 1
fi
gov=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n1.26\n' "${gov%%-*}" | sort -V | head -n1)" != "1.26" ]; then
  echo "deps: Go $gov is too old; Multiplane needs Go 1.26 or newer" >&2
  exit 1
fi

have_postgres || missing+=(postgresql)
need_cmd curl curl
if [ "$want" = test ]; then
  need_cmd ip iproute2
  need_cmd tc iproute2
  need_cmd nft nftables
  need_cmd ethtool ethtool
  need_cmd ping iputils-ping
  need_cmd sysctl procps
  need_cmd systemd-analyze systemd
  need_cmd dpkg-deb dpkg
  need_cmd node nodejs
  need_cmd npm npm
  need_cmd chromium chromium # the dashboard's browser test (playwright-core drives it)
fi

# npm_tools installs the npm packages of package-lock.json (the OpenAPI
# linter) when node_modules does not hold exactly them.
npm_tools() {
  [ "$want" = test ] || return 0
  cd "$(dirname "$0")/.."
  if [ -f node_modules/.package-lock.json ] && cmp -s <(node -e 'const l=require("./package-lock.json").packages;console.log(JSON.stringify(Object.keys(l).filter(k=>k).map(k=>[k,l[k].version])))') \
      <(node -e 'const l=require("./node_modules/.package-lock.json").packages;console.log(JSON.stringify(Object.keys(l).filter(k=>k).map(k=>[k,l[k].version])))'); then
    return 0
  fi
  echo "deps: installing npm packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
}

if [ ${#missing[@]} -eq 0 ]; then
  npm_tools
  exit 0
fi
# Deduplicate.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "deps: missing Debian packages: ${missing[*]}" >&2
  echo "deps: install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "deps: installing ${missing[*]}"
# Keep package scripts from starting services (the postgresql package would
# start a system cluster on port 5432; fabricd runs its own).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod 755 "$policy"
  made_policy=1
fi
cleanup() { if [ "$made_policy" = 1 ]; then "${sudo[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${missing[*]}"
npm_tools
