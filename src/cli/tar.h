// Tar archives for `space cp` and `space image import`, with libarchive. Writing walks a local
// directory (files, directories, symlinks, modes) into a streamed pax archive. Extracting reads
// an archive that came out of a sandbox, which is untrusted: absolute names, "..", paths through
// symlinks, devices and FIFOs are refused, and setuid/setgid/sticky bits are dropped, so a
// sandbox cannot write outside the destination or plant a setuid binary on the host.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace space::cli {

// Receives archive bytes as they are produced.
using TarSink = std::function<Result<void>(std::string_view)>;
// Fills `out` with up to `n` archive bytes; 0 = end.
using TarSource = std::function<Result<size_t>(char* out, size_t n)>;

// What write_tar does with one entry (its path relative to the directory, '/'-separated).
enum class TarFilter {
  kInclude,
  kSkip,  // leave it out (a directory: with everything under it)
  // A directory: leave it out, but look inside; it is written after all (before the first
  // entry under it that is included) if anything under it is.
  kSkipButLookInside,
};

struct TarWriteOptions {
  // true: numeric owners as on disk (image import); false: everything owned by root (0:0), as
  // files copied into a sandbox should be.
  bool keep_owners = false;
  // Which entries to write (unset: all); a build context's .dockerignore (dockerignore.h).
  std::function<TarFilter(const std::string& path, bool is_dir)> filter;
  // Files appended after the tree, as {name in the archive, local path} (a Dockerfile from
  // outside a build context).
  std::vector<std::pair<std::string, std::filesystem::path>> extra_files;
};

// Writes the tree under `dir` (entries relative to it; the directory itself is not an entry),
// as options.filter chooses, then options.extra_files. Sockets and device nodes are skipped
// with a warning on stderr.
Result<void> write_tar(const std::filesystem::path& dir, const TarSink& sink,
                       TarWriteOptions options = {});

// Extracts an archive (any compression libarchive reads) into the existing directory `dest`.
// Returns the number of entries.
Result<uint64_t> extract_tar(const std::filesystem::path& dest, const TarSource& source);

}  // namespace space::cli
