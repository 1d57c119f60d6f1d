// Tar archives from clients (file uploads, image imports) are untrusted: UploadArchive reads
// one from a ChunkSource, and clean_archive_name turns each entry name into a clean relative
// path, or refuses it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "daemon/service.h"

struct archive;

namespace space::daemon {

// "./a//b/" -> "a/b"; "/etc/x" -> "etc/x" (a leading "/" is dropped, as tar does); "." -> "".
// Any ".." component is refused (kInvalidArgument).
Result<std::string> clean_archive_name(const std::string& name);

// A libarchive reader over an upload: tar or GNU tar, plain or with any compression libarchive
// knows. `what` names the upload in errors ("image archive", "tar upload").
class UploadArchive {
 public:
  static Result<std::unique_ptr<UploadArchive>> open(const ChunkSource& source, std::string what);
  ~UploadArchive();
  UploadArchive(const UploadArchive&) = delete;
  UploadArchive& operator=(const UploadArchive&) = delete;

  archive* get() const { return a_; }
  // The error behind the last failed read: the source's own if it failed, else libarchive's.
  Error error() const;

 private:
  UploadArchive(const ChunkSource& source, std::string what);

  archive* a_;
  const ChunkSource& source_;
  std::string what_;
  std::string buf_;
  std::optional<Error> source_error_;
};

}  // namespace space::daemon
