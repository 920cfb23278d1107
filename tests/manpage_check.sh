#!/usr/bin/env bash
# manpage_check.sh DGNODE MANPAGE: every setting `DGNODE --help` lists (the
# settings table: --config, --help, --version, each --SETTING, each cache
# spec PART=) has an entry in MANPAGE: the tag line of a .TP item that names
# it (roff escapes and font macros stripped).  Prints what is missing;
# exit 0 when nothing is, 1 otherwise.
set -euo pipefail
DGNODE=${1:?usage: $0 /path/to/dgnode /path/to/dgnode.1}
MAN=${2:?usage: $0 /path/to/dgnode /path/to/dgnode.1}
export LC_ALL=C

help=$("$DGNODE" --help)
# Option names: "  --name ARG", "  --[no-]name"; cache parts: "  name=...".
mapfile -t opts < <(sed -n -E 's/^  --(\[no-\])?([a-z][a-z0-9-]*).*/\2/p' <<<"$help")
mapfile -t parts < <(sed -n -E 's/^  ([a-z][a-z0-9-]*)=.*/\1/p' <<<"$help")
((${#opts[@]} >= 20)) || { echo "manpage_check: only ${#opts[@]} options in $DGNODE --help" >&2; exit 1; }
((${#parts[@]} >= 5)) || { echo "manpage_check: only ${#parts[@]} cache parts in $DGNODE --help" >&2; exit 1; }

# The tag lines of the .TP items, plain: "\-" -> "-", macros and fonts gone.
tags=$(awk 'tp { print; tp = 0; next } /^\.TP/ { tp = 1 }' "$MAN" |
	sed -E 's/\\-/-/g; s/\\f[BIRP]//g; s/^\.[A-Z]+ //; s/"//g; s/ //g')

missing=0
for o in "${opts[@]}"; do
	if ! grep -q -E -- "(^|,)--(no-)?$o(,|$|[A-Z])" <<<"$tags"; then
		echo "$MAN: no .TP entry for --$o (dgnode --help lists it)"
		missing=1
	fi
done
for p in "${parts[@]}"; do
	if ! grep -q -E -- "^$p=" <<<"$tags"; then
		echo "$MAN: no .TP entry for the cache spec part $p= (dgnode --help lists it)"
		missing=1
	fi
done
((missing == 0)) && echo "manpage_check: ${#opts[@]} options and ${#parts[@]} cache parts, all in $MAN"
exit "$missing"
