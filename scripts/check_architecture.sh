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
#      docs/MEASUREMENTS.md, the measurement logs) has a heading naming an "Issue N" or a
#      date, nor prose naming "issue N" or an ISO date (yyyy-mm-dd) outside code blocks:
#      dated history belongs in docs/notes/DEVELOPMENT.md, dated measurements in
#      docs/MEASUREMENTS.md;
#   4. the page's include diagram is the tree's: its fenced block tagged `includes` (one
#      line per folder, "folder: dep dep ...") against the folder -> folder edges of the
#      `#include "..."` lines of every tracked .c/.h/.cu outside tests/ (a file in the
#      repository root, scanprop.h, is a node of its own); one line per edge in the tree
#      that the block does not draw and per drawn edge no file makes.
# Prints one line per problem and exits 1 if there is any; silent and 0 otherwise.
# ARCH=file and DOCS=dir check other files; --print-includes prints the tree's edges in
# the block's format (paste it into the page after moving code); --self-test shows the
# check fails on a copy of the page with one edge removed and with one edge added (a
# plain run, without ARCH=, runs it too).
set -u
cd "$(dirname "$0")/.." || exit 2
arch=${ARCH:-docs/ARCHITECTURE.md}
docs=${DOCS:-docs}
roots="core layers optim data schedulers train cli apps bench tests python scripts"

# The tree's include edges, "from to file" (file: one includer that makes the edge).
tree_edges() {
  git ls-files -z -- '*.c' '*.h' '*.cu' | grep -zv '^tests/' |
  xargs -0 awk '
    /^[ \t]*#[ \t]*include[ \t]+"[^"]+\/[^"]*"/ {
      d = FILENAME; if (!sub(/\/[^\/]*$/, "", d)) d = FILENAME   # a root file is its own node
      t = $0; sub(/^[^"]*"/, "", t); sub(/".*/, "", t); sub(/\/[^\/]*$/, "", t)
      if (t != d) print d, t, FILENAME
    }' |
  sort -u -k1,1 -k2,2
}

# The page's drawn edges, "from to", from its ```includes block.
drawn_edges() {
  awk '/^```includes[[:space:]]*$/ { on = 1; next }
       on && /^```/ { exit }
       on && NF { sub(/:$/, "", $1); for (i = 2; i <= NF; i++) print $1, $i }' "$1" | sort -u
}

if [ "${1:-}" = --print-includes ]; then
  # every folder that holds a source file, with the folders it includes from (maybe none)
  { git ls-files -- '*.c' '*.h' '*.cu' | grep -v '^tests/' |
      while read -r f; do d=$(dirname "$f"); [ "$d" = . ] && d=$f; echo "$d"; done | sort -u
    tree_edges; } |
  awk 'NF == 1 { order[++n] = $1; next } { deps[$1] = deps[$1] " " $2 }
       END { for (i = 1; i <= n; i++) print order[i] ":" deps[order[i]] }'
  exit 0
fi

if [ "${1:-}" = --self-test ]; then
  tmp=$(mktemp -d) || exit 2
  trap 'rm -rf "$tmp"' EXIT
  # one edge removed: the first drawn line loses its last dependency
  awk '/^```includes/ { on = 1; print; next } on && /^```/ { on = 0 }
       on && !done && NF > 1 { NF = NF - 1; done = 1 } { print }' "$arch" > "$tmp/removed.md"
  # one edge added: core/ includes apps/
  awk '/^```includes/ { on = 1; print; next } on && /^```/ { on = 0 }
       on && $1 == "core:" { $0 = $0 " apps" } { print }' "$arch" > "$tmp/added.md"
  st=0
  for c in removed added; do
    [ $c = removed ] && want="is not drawn in" || want="include core -> apps is drawn"
    if out=$(ARCH="$tmp/$c.md" "$0" 2>&1); then
      echo "check_architecture --self-test: a page with one edge $c passed"; st=1
    elif ! grep -q "$want" <<<"$out"; then
      echo "check_architecture --self-test: a page with one edge $c failed without naming it: $out"; st=1
    fi
  done
  [ $st -eq 0 ] && echo "check_architecture --self-test: a page with one edge removed or added fails"
  exit $st
fi

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
  find "$docs" -name '*.md' -not -path "$docs/notes/*" -not -path "$docs/MEASUREMENTS.md" | sort |
  while read -r page; do
    awk -v page="$page" '
      /^```/ { fence = !fence; next }
      fence { next }
      /^#/ {
        if ($0 ~ /[Ii]ssue [0-9]/ || $0 ~ /(19|20)[0-9][0-9]-[01][0-9]/ ||
            $0 ~ /(January|February|March|April|May|June|July|August|September|October|November|December) (19|20)[0-9][0-9]/)
          printf "%s:%d: heading names an issue or a date (history goes to docs/notes/DEVELOPMENT.md, measurements to docs/MEASUREMENTS.md): %s\n", page, NR, $0
        next
      }
      $0 ~ /[Ii]ssue [0-9]/ || $0 ~ /(19|20)[0-9][0-9]-[01][0-9]-[0-3][0-9]/ {
        printf "%s:%d: names an issue or a date (history goes to docs/notes/DEVELOPMENT.md, measurements to docs/MEASUREMENTS.md): %s\n", page, NR, substr($0, 1, 100)
      }' "$page"
  done

  # 4. the include diagram against the tree
  drawn=$(drawn_edges "$arch")
  if [ -z "$drawn" ]; then
    echo "$arch has no \`\`\`includes block (scripts/check_architecture.sh --print-includes prints one)"
  else
    tree=$(tree_edges)
    while read -r from to file; do
      grep -qxF "$from $to" <<<"$drawn" ||
        echo "include $from -> $to in the tree ($file) is not drawn in $arch's includes block"
    done <<<"$tree"
    while read -r from to; do
      awk -v f="$from" -v t="$to" '$1 == f && $2 == t { found = 1 } END { exit !found }' <<<"$tree" ||
        echo "include $from -> $to is drawn in $arch's includes block, but no file of $from includes $to/"
    done <<<"$drawn"
  fi

  # 4 can fail: on the real page (no ARCH=), a copy with one edge removed and one with one
  # edge added must each fail naming that edge
  if [ -z "${ARCH:-}" ] && ! out=$("$0" --self-test); then echo "$out"; fi
)
if [ -n "$problems" ]; then
  echo "$problems"
  exit 1
fi
exit 0
