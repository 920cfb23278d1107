# netnslib.sh — "hosts" as network namespaces joined by a bridge, and the
# network faults between them (sourced after cachelib.sh, not run).
#
#   netns_hosts PREFIX SUBNET HOST...: a namespace PREFIX-br holding bridge
#       br0, and per HOST a namespace PREFIX-HOST with lo up and eth0 (a veth
#       to br0) at SUBNET.<i> (i from 1, in order); NS[HOST], IP[HOST].
#       Nothing is added to the machine's own namespace.  Skips (exit 77,
#       with the reason) without root, iproute2, bridges or veths.
#   netns_pings HOST...: every HOST pings the next one (wait_until it).
#   netns_cut A B: packets from A to B are dropped (a blackhole route to B
#       in A's namespace; one way — cut B A too for both ways).
#   netns_heal A B / netns_heal_all: the route(s) gone again.
#   CUTS: the cuts in force, as "A>B" words.
# cleanup_extra (lib.sh's EXIT trap calls it after stopping every process):
# deletes every namespace made here, pass, failure or Ctrl-C.
# The hosts' addresses are not loopback, so every process here needs the
# cluster secret (a node without one refuses them, issue 14): it is set in
# DG_CLUSTER_SECRET, which dgnode, dgctl and cacheclient read.
# shellcheck shell=bash
# shellcheck disable=SC2034  # NS, IP and CUTS are read by the test scripts

declare -A NS=() IP=()
NS_MADE=()
export DG_CLUSTER_SECRET="netns-test-secret-$$"
CUTS=()

cleanup_extra() {
	local ns
	for ns in "${NS_MADE[@]}"; do
		ip netns delete "$ns" 2>/dev/null ||
			echo "netnslib: could not delete namespace $ns" >&2
	done
	NS_MADE=()
}

# mkns NAME: a namespace with lo up; skips when the kernel or the container
# does not allow it.
mkns() {
	local err
	if ! err=$(ip netns add "$1" 2>&1); then
		skip "ip netns add $1 failed: $err"
	fi
	NS_MADE+=("$1")
	if ! err=$(ip netns exec "$1" ip link set lo up 2>&1); then
		skip "ip netns exec $1 failed: $err"
	fi
	# Outgoing connections take ephemeral ports from 50000 up, so a node
	# dialling its peers never holds the transport or admin port
	# (47500/47600) another node of this host is about to listen on.
	ip netns exec "$1" sysctl -qw net.ipv4.ip_local_port_range="50000 60999" 2>/dev/null || true
}

netns_hosts() {
	local prefix=$1 subnet=$2 i=0 h br
	shift 2
	((EUID == 0)) || skip "not root: creating network namespaces needs root"
	command -v ip >/dev/null || skip "no ip command (apt-get install iproute2)"
	br=$prefix-br
	mkns "$br"
	ip -n "$br" link add br0 type bridge || skip "no bridge support (ip link add type bridge failed)"
	ip -n "$br" link set br0 up
	for h in "$@"; do
		i=$((i + 1))
		NS[$h]=$prefix-$h
		IP[$h]=$subnet.$i
		mkns "${NS[$h]}"
		ip -n "$br" link add "v$i" type veth peer name eth0 netns "${NS[$h]}" ||
			skip "no veth support (ip link add type veth failed)"
		ip -n "$br" link set "v$i" master br0 up
		ip -n "${NS[$h]}" addr add "${IP[$h]}/24" dev eth0
		ip -n "${NS[$h]}" link set eth0 up
	done
}

netns_pings() {
	local n=$# i a b
	local -a hs=("$@")
	for ((i = 0; i < n; i++)); do
		a=${hs[i]} b=${hs[(i + 1) % n]}
		ip netns exec "${NS[$a]}" ping -c1 -W1 "${IP[$b]}" >/dev/null 2>&1 || return 1
	done
}

netns_cut() {
	ip -n "${NS[$1]}" route add blackhole "${IP[$2]}/32" 2>/dev/null || return 0
	CUTS+=("$1>$2")
}

netns_heal() {
	local c keep=()
	ip -n "${NS[$1]}" route del blackhole "${IP[$2]}/32" 2>/dev/null || true
	for c in "${CUTS[@]}"; do
		[[ $c == "$1>$2" ]] || keep+=("$c")
	done
	CUTS=("${keep[@]}")
}

netns_heal_all() {
	local c
	for c in "${CUTS[@]}"; do
		ip -n "${NS[${c%%>*}]}" route del blackhole "${IP[${c#*>}]}/32" 2>/dev/null || true
	done
	CUTS=()
}
