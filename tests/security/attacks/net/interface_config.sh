#!/bin/sh
# Reconfigures networking with the ordinary tools an agent would reach for: ip link add
# (veth, dummy), ip addr add, ip route add default, ip link set lo down, ip netns add, and
# iptables/nft if installed.
# Blocked by: no CAP_NET_ADMIN over the host-owned network namespace; netns creation and
# mounts are refused by seccomp.
# space-attack: sandbox=shared
set -u
ok=""
for cmd in "ip link add pwn0 type dummy" "ip link add pwn1 type veth peer name pwn2" \
           "ip addr add 10.99.0.2/24 dev lo" "ip route add default dev lo" \
           "ip link set lo down" "ip netns add pwn" "iptables -P OUTPUT ACCEPT" \
           "nft add table inet pwn"; do
  set -- $cmd
  command -v "$1" >/dev/null 2>&1 || { ok="$ok $1:absent;"; continue; }
  if $cmd >/dev/null 2>&1; then
    echo "ESCAPED: '$cmd' succeeded"
    exit 1
  fi
  ok="$ok '$cmd' failed;"
done
ip -o link | grep -v ' lo:' | grep -q . && { echo "ESCAPED: a non-lo interface exists"; exit 1; }
echo "BLOCKED:$ok"
