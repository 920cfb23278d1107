# cdplib.sh — a headless browser driven over the Chrome DevTools protocol
# from bash (sourced after lib.sh, not run).
#
# The browser (Debian's chromium-headless-shell, or chromium --headless)
# runs with --remote-debugging-pipe: it reads protocol messages, each a JSON
# object ended by a NUL byte, on its fd 3 and writes answers and events the
# same way on its fd 4.  Two FIFOs in $WORK connect them to this shell, so a
# test needs no WebSocket client, no Python and no Node — only jq.
#   - cdp_start: starts the browser (skips the test, exit 77, when there is
#     none) with a profile in $WORK; cleanup_cdp (called by the test's
#     cleanup_extra) stops it;
#   - cdp METHOD PARAMS_JSON [SESSION]: one command, its answer's "result"
#     in CDP_RESULT; dies on an error answer or after 20 s;
#   - cdp_open URL WIDTH HEIGHT [MOBILE]: a new page at URL, its session in
#     CDP_SESSION, the viewport WIDTH x HEIGHT; what the page throws or
#     logs with console.error collects in window.__cdp_errors;
#   - cdp_eval EXPRESSION: the expression's value (JSON.stringify it for
#     objects) in CDP_VALUE, evaluated in CDP_SESSION's page;
#   - cdp_screenshot FILE: a PNG of CDP_SESSION's viewport.
# shellcheck shell=bash
# shellcheck disable=SC2034  # variables set here are read by the test scripts

CDP_ID=0
CDP_PID=
CDP_W=
CDP_R=
CDP_SESSION=

cdp_start() {
	local bin args=()
	if bin=$(command -v chromium-headless-shell); then
		:
	elif bin=$(command -v chromium); then
		args=(--headless)
	else
		skip "no headless browser (apt-get install chromium-headless-shell)"
	fi
	command -v jq >/dev/null || skip "no jq (apt-get install jq)"
	command -v base64 >/dev/null || skip "no base64 (coreutils)"
	mkfifo "$WORK/cdp.in" "$WORK/cdp.out"
	# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to
	# start; the only page loaded is the node's own, on 127.0.0.1.
	"$bin" "${args[@]}" --no-sandbox --disable-gpu --no-first-run \
		--disable-extensions --disable-background-networking --disable-sync \
		--user-data-dir="$WORK/browser" --remote-debugging-pipe about:blank \
		3<"$WORK/cdp.in" 4>"$WORK/cdp.out" 2>"$WORK/browser.err" &
	CDP_PID=$!
	exec {CDP_W}>"$WORK/cdp.in" {CDP_R}<"$WORK/cdp.out"
	cdp Browser.getVersion '{}'
	log "browser: $(jq -r .product <<<"$CDP_RESULT") ($bin)"
}

cleanup_cdp() {
	[[ -n $CDP_W ]] && exec {CDP_W}>&- 2>/dev/null
	[[ -n $CDP_R ]] && exec {CDP_R}<&- 2>/dev/null
	CDP_W= CDP_R=
	if [[ -n $CDP_PID ]]; then
		# the browser exits when its pipe closes; make sure of it
		local i
		for i in $(seq 1 50); do
			kill -0 "$CDP_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$CDP_PID" 2>/dev/null
		wait "$CDP_PID" 2>/dev/null
		CDP_PID=
	fi
}

# cdp METHOD PARAMS_JSON [SESSION]
cdp() {
	local method=$1 params=$2 session=${3:-} msg id
	CDP_ID=$((CDP_ID + 1))
	id=$CDP_ID
	if [[ -n $session ]]; then
		printf '{"id":%d,"method":"%s","params":%s,"sessionId":"%s"}\0' \
			"$id" "$method" "$params" "$session" >&"$CDP_W"
	else
		printf '{"id":%d,"method":"%s","params":%s}\0' "$id" "$method" "$params" >&"$CDP_W"
	fi
	local end=$((SECONDS + 20))
	while ((SECONDS < end)); do
		# answers and events come in order; events are skipped
		IFS= read -r -d '' -t 20 msg <&"$CDP_R" || break
		[[ $msg == *"\"id\":$id,"* || $msg == *"\"id\":$id}"* ]] || continue
		[[ $(jq -r '.id // empty' <<<"$msg") == "$id" ]] || continue
		if jq -e .error >/dev/null <<<"$msg"; then
			die "browser: $method: $(jq -c .error <<<"$msg")"
		fi
		CDP_RESULT=$(jq -c .result <<<"$msg")
		return 0
	done
	die "browser: $method: no answer within 20 s"
}

# cdp_open URL WIDTH HEIGHT [MOBILE]
cdp_open() {
	local url=$1 w=$2 h=$3 mobile=${4:-false}
	cdp Target.createTarget "$(jq -nc --arg u about:blank '{url: $u}')"
	local target
	target=$(jq -r .targetId <<<"$CDP_RESULT")
	cdp Target.attachToTarget "$(jq -nc --arg t "$target" '{targetId: $t, flatten: true}')"
	CDP_SESSION=$(jq -r .sessionId <<<"$CDP_RESULT")
	cdp_viewport "$w" "$h" "$mobile"
	# before any script of the page: collect what it throws or logs as an
	# error in window.__cdp_errors (run by the browser, not subject to the
	# page's Content-Security-Policy)
	cdp Page.enable '{}' "$CDP_SESSION"
	cdp Page.addScriptToEvaluateOnNewDocument "$(jq -nc --arg s '
		window.__cdp_errors = [];
		addEventListener("error", (e) => __cdp_errors.push("error: " + e.message));
		addEventListener("unhandledrejection", (e) => __cdp_errors.push("rejection: " + e.reason));
		const ce = console.error;
		console.error = (...a) => { __cdp_errors.push("console: " + a.join(" ")); ce(...a); };
	' '{source: $s}')" "$CDP_SESSION"
	cdp Page.navigate "$(jq -nc --arg u "$url" '{url: $u}')" "$CDP_SESSION"
}

# cdp_viewport WIDTH HEIGHT [MOBILE]
cdp_viewport() {
	cdp Emulation.setDeviceMetricsOverride "$(jq -nc --argjson w "$1" --argjson h "$2" \
		--argjson m "${3:-false}" '{width: $w, height: $h, deviceScaleFactor: 1, mobile: $m}')" \
		"$CDP_SESSION"
}

# cdp_eval EXPRESSION
cdp_eval() {
	cdp Runtime.evaluate "$(jq -nc --arg e "$1" '{expression: $e, returnByValue: true}')" \
		"$CDP_SESSION"
	if jq -e .exceptionDetails >/dev/null <<<"$CDP_RESULT"; then
		die "browser: the page threw: $(jq -c .exceptionDetails <<<"$CDP_RESULT")"
	fi
	CDP_VALUE=$(jq -r '.result.value // empty' <<<"$CDP_RESULT")
}

# cdp_screenshot FILE
cdp_screenshot() {
	cdp Page.captureScreenshot '{"format":"png"}' "$CDP_SESSION"
	jq -r .data <<<"$CDP_RESULT" | base64 -d >"$1"
	log "screenshot: $1 ($(wc -c <"$1") bytes)"
}
