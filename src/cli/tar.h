// Tar archives for `space cp` and `space image import`, with libarchive. Writing walks a local
// directory (files, directories, symlinks, modes) into a streamed pax archive. Extracting reads
// an archive that came out of a sandbox, which is untrusted: absolute names, "..", paths through
// symlinks, devices and FIFOs are refused, and setuid/setgid/sticky bits are dropped, so a
// sandbox cannot write outside the destination or plant a setuid binary on the host.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include "common/error.h"

namespace space::cli {

// Receives archive bytes as they are produced.
using TarSink = std::function<Result<void>(std::string_view)>;
// Fills `out` with up to `n` archive bytes; 0 = end.
using TarSource = std::function<Result<size_t>(char* out, size_t n)>;

struct TarWriteOptions {
  // true: numeric owners as on disk (image import); false: everything owned by root (0:0), as
  // files copied into a sandbox should be.
  bool keep_owners = false;
};

// Writes the tree under `dir` (entries relative to it; the directory itself is not an entry).
// Sockets and device nodes are skipped with a warning on stderr.
Result<void> write_tar(const std::filesystem::path& dir, const TarSink& sink,
                       TarWriteOptions options = {});

// Extracts an archive (any compression libarchive reads) into the existing directory `dest`.
// Returns the number of entries.
Result<uint64_t> extract_tar(const std::filesystem::path& dest, const TarSource& source);

}  // namespace space::cli
