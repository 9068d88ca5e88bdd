# cli.sh — what the CLI test scripts (tests/cli/*.sh) share; source it after
# setting $pcgc and $src. Gives $tmp (removed on exit), the pass/fail
# counters and:
#   expect CODE CMD...   runs CMD (stdout to $tmp/out, stderr to $tmp/err) and
#                        checks its exit code, showing stderr and stdout if wrong
#   has FILE TEXT        FILE contains TEXT (a fixed string)
#   finish NAME          prints "NAME: P passed, F failed"; exit status 0 iff F is 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0

ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

expect() {
  local want=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then ok; else
    bad "'$*' exited $got, expected $want"; sed 's/^/  | /' "$tmp/err" "$tmp/out" | head -30 >&2; fi
}

has() {
  if grep -qF -- "$2" "$1"; then ok; else bad "$(basename "$1") lacks '$2'"; sed 's/^/  | /' "$1" | head -30 >&2; fi
}

finish() {
  echo "$1: $passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
