// The control channel between spaced and its gateway process, space-egress
// (docs/egress.md, "The gateway process"). A SOCK_SEQPACKET socket pair: every message is one
// JSON object in one packet (at most kMaxMessage bytes, nested at most kMaxDepth deep),
// optionally with file descriptors attached (SCM_RIGHTS, at most kMaxFds). Messages:
//
//   spaced -> space-egress (ToGateway)
//     {"op":"init","options":{...},"secrets":{NAME: SecretDef::to_wire()}}    first, once
//     {"op":"attach","seq":N,"id":ID,"policy":Policy::to_json(),"grants":[{name,placeholder}],
//      "ca_key":PEM,"ca_cert":PEM,"kinds":[listener kinds],"known":{NAME:[values]}}  + fds
//     {"op":"detach","seq":N,"id":ID}
//     {"op":"stats","seq":N}
//     {"op":"secret","seq":N,"value":V} | {"op":"secret","seq":N,"error":{code,message}}
//   space-egress -> spaced (ToDaemon)
//     {"op":"ready","pid":P} | {"op":"ready","error":{code,message}}
//     {"op":"reply","seq":N,"ok":true,...counters} | {"op":"reply","seq":N,"error":{code,message}}
//     {"op":"audit","id":ID,"kind":K,"data":{...}}
//     {"op":"secret","seq":N,"id":ID,"name":NAME}
//
// Each kind is a struct below, written by one encoder and read by one validating parser; the
// "op" names and field names live in wire.cc only. spaced treats everything that comes back as
// untrusted (the process parses hostile bytes): parse_to_daemon() refuses, with its reason, a
// message of an unknown op, a missing or mistyped field, a seq out of range, a string over its
// bound, an audit kind that is not the gateway's own, or fds where none belong; it never throws.
// Sub-documents with validating parsers of their own travel as JSON objects: a policy
// (Policy::from_json) and secret definitions (SecretDef::from_wire).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "egress/gateway.h"

namespace space::egress::wire {

inline constexpr size_t kMaxMessage = 4 << 20;
inline constexpr size_t kMaxFds = 8;
inline constexpr int kMaxDepth = 32;
// Sequence numbers stay within what every JSON reader holds exactly.
inline constexpr uint64_t kMaxSeq = uint64_t{1} << 53;
inline constexpr size_t kMaxName = 1024;          // ids, secret names, audit kinds
inline constexpr size_t kMaxErrorMessage = 4096;  // an error's message
inline constexpr size_t kMaxPem = 256 * 1024;     // a CA key or certificate
inline constexpr int kListenerKinds = 4;          // egress::ListenerKind (internal.h)

// A message as it travels: the JSON object and the fds that came with it.
struct Message {
  nlohmann::json body;
  std::vector<UniqueFd> fds;
};

// --- spaced -> space-egress ---

struct Init {
  Gateway::Options options;  // resolve, upstream_ca_pems, connect_timeout, idle_timeout
  std::map<std::string, nlohmann::json> secrets;  // name -> SecretDef::to_wire() (an object)
};
struct Attach {
  uint64_t seq = 0;  // 0: nobody waits for the reply (a restarted process is handed a sandbox)
  std::string id;
  nlohmann::json policy;  // Policy::to_json() (an object)
  std::vector<Grant> grants;
  std::string ca_key, ca_cert;                            // PEM
  std::map<std::string, std::vector<std::string>> known;  // grant -> values already seen
  std::vector<int> kinds;                                 // one ListenerKind per listener
  std::vector<UniqueFd> fds;  // received: the listeners, one per kind (sent: see send())
};
struct Detach {
  uint64_t seq = 0;
  std::string id;
};
struct StatsRequest {
  uint64_t seq = 0;
};
struct SecretAnswer {
  uint64_t seq = 0;
  Result<std::string> value = std::string();  // or why spaced refused it
};
using ToGateway = std::variant<Init, Attach, Detach, StatsRequest, SecretAnswer>;

// --- space-egress -> spaced ---

struct Ready {
  Result<int64_t> pid = int64_t{0};  // or why the process could not start
};
struct Reply {
  uint64_t seq = 0;
  Result<void> result;                  // the request's outcome
  std::optional<Gateway::Stats> stats;  // a stats request's counters (absent ones read 0)
};
struct Audit {
  std::string id, kind;  // kind: one of the gateway's own (egress.request, credential.use, ...)
  nlohmann::json data;   // an object
};
struct SecretRequest {
  uint64_t seq = 0;
  std::string id, name;
};
using ToDaemon = std::variant<Ready, Reply, Audit, SecretRequest>;

// The one parser of each direction: the message's kind by its op, then that kind's fields, all
// checked. Fds are taken from `m` (an attach's listeners) or closed with it.
[[nodiscard]] Result<ToGateway> parse_to_gateway(Message m);
[[nodiscard]] Result<ToDaemon> parse_to_daemon(Message m);

// The one encoder of each kind. Secret material (a CA key, a secret's value) is in the JSON:
// send() below wipes its copy.
nlohmann::json encode(const ToGateway& m);
nlohmann::json encode(const ToDaemon& m);

// Encodes and sends one message (blocking). An attach goes with `fds`, its listeners (one per
// kind: the process gets copies, spaced keeps its own); other kinds with none.
[[nodiscard]] Result<void> send(int sock, const ToGateway& m, std::span<const int> fds = {});
[[nodiscard]] Result<void> send(int sock, const ToDaemon& m);

// Receives one message (blocking). kUnavailable when the peer has closed; kInvalidArgument for
// a packet that is not a JSON object or is nested too deep (its fds are closed).
[[nodiscard]] Result<Message> recv(int sock);

// The raw send under the encoders, for tests that play a peer speaking nonsense. Invalid UTF-8
// in strings is replaced, never thrown on.
[[nodiscard]] Result<void> send_json(int sock, const nlohmann::json& body,
                                     std::span<const int> fds = {});

}  // namespace space::egress::wire
