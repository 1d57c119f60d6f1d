// The control channel between spaced and its gateway process, space-egress
// (docs/egress.md, "The gateway process"). A SOCK_SEQPACKET socket pair: every message is one
// JSON object in one packet (at most kMaxMessage bytes), optionally with file descriptors
// attached (SCM_RIGHTS, at most kMaxFds). Messages:
//
//   spaced -> space-egress
//     {"op":"init","options":{...},"secrets":{NAME: SecretDef::to_wire()}}    first, once
//     {"op":"attach","seq":N,"id":ID,"policy":Policy::to_json(),"grants":[{name,placeholder}],
//      "ca_key":PEM,"ca_cert":PEM,"kinds":[listener kinds],"known":{NAME:[values]}}  + fds
//     {"op":"detach","seq":N,"id":ID}
//     {"op":"stats","seq":N}
//     {"op":"secret","seq":N,"value":V} | {"op":"secret","seq":N,"error":{code,message}}
//   space-egress -> spaced
//     {"op":"ready","pid":P}
//     {"op":"reply","seq":N,"ok":true,...} | {"op":"reply","seq":N,"error":{code,message}}
//     {"op":"audit","id":ID,"kind":K,"data":{...}}
//     {"op":"secret","seq":N,"id":ID,"name":NAME}
//
// spaced treats everything that comes back as untrusted: the process parses hostile bytes.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "egress/gateway.h"

namespace space::egress::wire {

inline constexpr size_t kMaxMessage = 4 << 20;
inline constexpr size_t kMaxFds = 8;

struct Message {
  nlohmann::json body;
  std::vector<UniqueFd> fds;
};

// Sends one message (blocking). Invalid UTF-8 in strings is replaced, never thrown on.
[[nodiscard]] Result<void> send(int sock, const nlohmann::json& body,
                                std::span<const int> fds = {});
// Receives one message (blocking). kUnavailable when the peer has closed; kInvalidArgument for
// a packet that is not a JSON object (its fds are closed).
[[nodiscard]] Result<Message> recv(int sock);

// The gateway's counters as a reply's fields and back (a missing or mistyped field reads 0).
nlohmann::json stats_json(const Gateway::Stats& s);
Gateway::Stats stats_of(const nlohmann::json& j);

// An error as a message field and back.
nlohmann::json error_json(const Error& e);
Error error_of(const nlohmann::json& j);

}  // namespace space::egress::wire
