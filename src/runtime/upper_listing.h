// What `space diff` reads of an overlay's upper layer, and the line format in which
// space-upper-reader (src/upper_reader) hands a microVM's upper layer to the daemon.
//
// The linux runtime's upper layer is a host directory that the daemon walks itself; a microVM's
// is a directory on the VM's own ext4 disk, which only the confined reader parses. Both end as a
// list of UpperEntry, which the daemon classifies the same way (src/daemon/diff.cc). The
// listing comes from a process that parsed bytes the guest wrote: parse_listing() treats it as
// untrusted (every field, path and bound checked; the fuzz target upper_listing runs it).
//
// The format, one record a line (LF):
//   space-upper 1                        first line: the format and its version
//   e TYPE OPAQUE SIZE MTIME_NS PATH     an entry: TYPE d (directory), w (whiteout: a character
//                                        device 0:0) or o (anything else); OPAQUE 0 or 1;
//                                        SIZE and MTIME_NS decimal (MTIME_NS may be negative);
//                                        PATH relative to the upper layer ("etc/passwd"),
//                                        every byte outside 0x21-0x7e and '%' written %XX
//   end COUNT                            the last line of a complete listing: COUNT entries
//   limit MAX                            instead of end: more than MAX entries
//   error MESSAGE                        instead of end: what went wrong (printable ASCII)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::runtime {

struct UpperEntry {
  enum class Type : char { kDir = 'd', kWhiteout = 'w', kOther = 'o' };
  std::string path;  // relative to the upper layer: no leading '/', no empty, "." or ".." part
  Type type = Type::kOther;
  bool opaque = false;  // a directory that hides the lower one (overlay's opaque xattr "y")
  int64_t size = 0;
  int64_t mtime_ns = 0;  // nanoseconds since the epoch
};

inline constexpr std::string_view kListingHeader = "space-upper 1";
inline constexpr size_t kMaxUpperPath = 4096;  // bytes of a decoded path

// One entry's line, with its LF.
std::string encode_entry(const UpperEntry& e);
// A path's bytes as the format writes them (%XX outside 0x21-0x7e, and for '%').
std::string encode_path(std::string_view raw);

// Parses a whole listing. kResourceExhausted for a `limit` line or more than `max_entries`
// entries; kProtocol, with the reader's own words where it sent an `error` line, for anything
// else that is not a complete, well-formed listing.
Result<std::vector<UpperEntry>> parse_listing(std::string_view text, size_t max_entries);

}  // namespace space::runtime
