#!/usr/bin/env bash
# Builds the library with each feature on its own, and with none, without
# the dev-dependencies (whose features would turn every feature on): a
# feature that needs another, or code that warns without one, fails here.
#
#   tools/check-features.sh
set -euo pipefail
cd "$(dirname "$0")/.."

check() { # check PACKAGE [FEATURE]
  local package=$1 feature=${2:-}
  echo "-- $package, feature: ${feature:-none}"
  local out
  if ! out=$(cargo check --quiet --message-format short -p "$package" --no-default-features \
    ${feature:+--features "$feature"} 2>&1); then
    echo "$out" >&2
    return 1
  fi
  if grep -q "warning" <<<"$out"; then
    echo "$out" >&2
    echo "error: warnings with feature '${feature:-none}' alone" >&2
    return 1
  fi
}

# The features a manifest declares, `default` aside.
features() { # features MANIFEST
  awk '/^\[features\]/ { on = 1; next } /^\[/ { on = 0 }
       on && /^[a-z0-9_-]+ *=/ && $1 != "default" { print $1 }' "$1"
}

check stateguard
for feature in $(features Cargo.toml); do
  check stateguard "$feature"
done
# The runtime's features that the facade does not pass on (its test
# hook), and each of the others once more, under its own name.
for feature in $(features guard-runtime/Cargo.toml); do
  check stateguard-runtime "$feature"
done
