#!/usr/bin/env bash
# No line of the page's JS over 120 characters (biome.json's lineWidth). Biome formats the code to that
# width but leaves what it cannot break: comments, JSDoc, and long string or template literals.
# Prints FILE:LINE: N characters for each such line and fails if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
# Characters, not bytes ("·" is two bytes): grep's `.` and bash's ${#text} count in a UTF-8 locale.
export LC_ALL=C.UTF-8
long=$(find frontend -name '*.js' -not -path '*/vendor/*' -not -name '*.gen.js' -print0 |
  xargs -0 grep -nE '^.{121,}' || true)
[ -z "$long" ] && exit 0
while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  text=${rest#*:}
  echo "$file:${rest%%:*}: ${#text} characters (at most 120)"
done <<<"$long"
exit 1
