// libFuzzer target: the gateway process's control channel (src/egress/wire.cc), both parsers,
// as spaced reads what a taken-over space-egress sends and as space-egress reads spaced. The
// first byte is the number of fds that came with the message (mod 10, /dev/null copies); the
// rest is the packet, read as recv() reads it (nesting bound, then JSON).
// Properties beyond "no crash, no exception": an accepted message of either direction encodes
// to a body that its parser accepts again (with as many fds as the kind takes) and that encodes
// to exactly the same JSON; an accepted attach holds one fd per listener kind; every other
// accepted kind came without fds.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "common/json_nesting.h"
#include "egress/wire.h"

namespace wire = space::egress::wire;
using nlohmann::json;

namespace {

std::vector<space::UniqueFd> some_fds(size_t n) {
  static int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<space::UniqueFd> fds;
  for (size_t i = 0; i < n; ++i) fds.emplace_back(::fcntl(null, F_DUPFD_CLOEXEC, 0));
  return fds;
}

// How many fds the kind takes; an attach must hold exactly one per listener kind.
size_t fds_taken(const wire::ToGateway& m) {
  auto* a = std::get_if<wire::Attach>(&m);
  if (a && a->fds.size() != a->kinds.size()) std::abort();
  return a ? a->kinds.size() : 0;
}
size_t fds_taken(const wire::ToDaemon&) { return 0; }

template <class Parse>
void check(const json& body, size_t nfds, Parse parse) {
  auto m = parse(wire::Message{body, some_fds(nfds)});
  if (!m) return;
  size_t taken = fds_taken(*m);
  if (taken != nfds) std::abort();
  json once = wire::encode(*m);
  auto again = parse(wire::Message{json::parse(once.dump()), some_fds(taken)});
  if (!again) std::abort();
  if (wire::encode(*again) != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t nfds = data[0] % 10;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!space::json_nesting_within(text, wire::kMaxDepth)) return 0;
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return 0;
  check(body, nfds, [](wire::Message m) { return wire::parse_to_daemon(std::move(m)); });
  check(body, nfds, [](wire::Message m) { return wire::parse_to_gateway(std::move(m)); });
  return 0;
}
