#!/usr/bin/env bash
# check_architecture.sh — the docs against the tree (run by `make test`).
#
#   1. every folder docs/ARCHITECTURE.md names exists: a path token that starts with one
#      of the tree's top-level folders and ends in "/" ("core/kernels/"), or the folder
#      part of a file path ("core/io/" in "core/io/fileio.c");
#   2. every source folder is named there: the top-level folders below, and every folder
#      under them that holds a .c, .h, .cu or .cc file git knows of (tracked, or new and
#      not ignored);
#   3. no user page (docs/*.md and below, except docs/notes/, the development record, and
#      docs/bench-results/, raw benchmark output) has a heading naming an "Issue N" or a
#      date, nor prose naming "issue N" or an ISO date (yyyy-mm-dd) outside code blocks:
#      dated history belongs in docs/notes/DEVELOPMENT.md.
# Prints one line per problem and exits 1 if there is any; silent and 0 otherwise.
# ARCH=file and DOCS=dir check other files (used to show the check can fail).
set -u
cd "$(dirname "$0")/.." || exit 2
arch=${ARCH:-docs/ARCHITECTURE.md}
docs=${DOCS:-docs}
roots="core layers optim data schedulers train cli apps bench tests python scripts"
[ -f "$arch" ] || { echo "check_architecture: $arch is missing"; exit 1; }

problems=$(
  # Folders named: tokens like core/kernels/ (not preceded by a path character).
  root_re=$(echo "$roots docs" | sed 's/ /|/g')
  named=$(grep -oE "(^|[^A-Za-z0-9_./<>-])($root_re)(/[A-Za-z0-9_.-]+)*/" "$arch" |
          sed -E 's#^[^a-z]*##; s#/+$##' | sort -u)

  # 1. a named folder that does not exist
  for d in $named; do
    [ -d "$d" ] || echo "$arch names folder $d/, which does not exist"
  done

  # 2. a source folder that is not named
  src=$( { for r in $roots; do echo "$r"; done
           git ls-files --cached --others --exclude-standard -- $roots 2>/dev/null |
             grep -E '\.(c|h|cu|cc)$' | xargs -r -n1 dirname; } | sort -u)
  for d in $src; do
    [ -d "$d" ] || continue   # listed by git but deleted in the work tree
    echo "$named" | grep -qxF "$d" || echo "$arch does not name source folder $d/"
  done

  # 3. dated or issue-numbered history in a user page
  find "$docs" -name '*.md' -not -path "$docs/notes/*" -not -path "$docs/bench-results/*" | sort |
  while read -r page; do
    awk -v page="$page" '
      /^```/ { fence = !fence; next }
      fence { next }
      /^#/ {
        if ($0 ~ /[Ii]ssue [0-9]/ || $0 ~ /(19|20)[0-9][0-9]-[01][0-9]/ ||
            $0 ~ /(January|February|March|April|May|June|July|August|September|October|November|December) (19|20)[0-9][0-9]/)
          printf "%s:%d: heading names an issue or a date (history goes to docs/notes/DEVELOPMENT.md): %s\n", page, NR, $0
        next
      }
      $0 ~ /[Ii]ssue [0-9]/ || $0 ~ /(19|20)[0-9][0-9]-[01][0-9]-[0-3][0-9]/ {
        printf "%s:%d: names an issue or a date (history goes to docs/notes/DEVELOPMENT.md): %s\n", page, NR, substr($0, 1, 100)
      }' "$page"
  done
)
if [ -n "$problems" ]; then
  echo "$problems"
  exit 1
fi
exit 0
