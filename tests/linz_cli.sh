#!/bin/bash
# linz_cli.sh DGLINZ DIR — dglinz's smoke test: the exit status and the
# lines it prints for two merged good files, a bad file, --json, --quiet,
# a budget too small, a parse error and --help.
set -u
dglinz=$1 dir=$2
fails=0
check() {   # check NAME WANT_STATUS WANT_REGEX ARGS...
	local name=$1 want=$2 re=$3
	shift 3
	local out status
	out=$("$dglinz" "$@" 2>&1)
	status=$?
	if [ "$status" -ne "$want" ] || ! grep -Eq -- "$re" <<<"$out"; then
		echo "FAIL $name: status $status (want $want), output:"
		echo "$out"
		fails=$((fails + 1))
	else
		echo "ok   $name"
	fi
}
check good 0 '^dglinz: keys=2 ops=6 ok=5 fail=0 info=1 .*verdict=linearizable' \
	"$dir/good-c1.hist" "$dir/good-c2.hist"
check good-one-file 1 'key x: not-linearizable' "$dir/good-c2.hist"
check bad 1 'key x: not-linearizable' "$dir/bad.hist"
check bad-details 1 'c2-0 +read -> 1 ' "$dir/bad.hist"
check bad-summary 1 'linearizable=1 not-linearizable=1 unknown=0 verdict=not-linearizable' \
	"$dir/bad.hist"
check bad-json 1 '^\{"type":"key","key":"x","verdict":"not-linearizable"' --json "$dir/bad.hist"
check bad-quiet 1 '^key x: not-linearizable \(ops=3 states=[0-9]+ ' --quiet "$dir/bad.hist"
check budget 3 'verdict=unknown' --max-states 1 "$dir/good-c1.hist" "$dir/good-c2.hist"
check parse-error 2 "bad.hist.*: .*outstanding" "$dir/bad.hist" "$dir/bad.hist"
check no-file 2 'no history file'
check bad-option 2 'positive integer' --max-states x "$dir/bad.hist"
check help 0 '^usage: dglinz' --help
[ "$fails" -eq 0 ]
