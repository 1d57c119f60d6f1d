// Reading untrusted tar uploads and cleaning their entry names.
#include "daemon/archive_names.h"

#include <archive.h>

namespace space::daemon {

Result<std::string> clean_archive_name(const std::string& name) {
  if (name.find('\0') != std::string::npos)
    return fail(Code::kInvalidArgument, "archive entry name contains a NUL byte");
  std::string out;
  size_t i = 0;
  while (i <= name.size()) {
    size_t j = name.find('/', i);
    if (j == std::string::npos) j = name.size();
    std::string comp = name.substr(i, j - i);
    if (comp == "..")
      return fail(Code::kInvalidArgument,
                  "archive entry \"" + name.substr(0, 200) + "\" contains \"..\"; refused");
    if (!comp.empty() && comp != ".") out += (out.empty() ? "" : "/") + comp;
    i = j + 1;
  }
  if (out.size() > 4096) return fail(Code::kInvalidArgument, "archive entry name too long");
  return out;
}

UploadArchive::UploadArchive(const ChunkSource& source, std::string what)
    : a_(archive_read_new()), source_(source), what_(std::move(what)) {}

UploadArchive::~UploadArchive() { archive_read_free(a_); }

Result<std::unique_ptr<UploadArchive>> UploadArchive::open(const ChunkSource& source,
                                                           std::string what) {
  std::unique_ptr<UploadArchive> u(new UploadArchive(source, std::move(what)));
  archive_read_support_filter_all(u->a_);
  archive_read_support_format_tar(u->a_);
  archive_read_support_format_gnutar(u->a_);
  auto reader = [](archive*, void* p, const void** buf) -> la_ssize_t {
    auto* self = static_cast<UploadArchive*>(p);
    auto r = self->source_(self->buf_);
    if (!r) {
      self->source_error_ = r.error();
      return -1;
    }
    *buf = self->buf_.data();
    return static_cast<la_ssize_t>(self->buf_.size());
  };
  if (archive_read_open(u->a_, u.get(), nullptr, reader, nullptr) != ARCHIVE_OK)
    return fail(u->error());
  return u;
}

Error UploadArchive::error() const {
  if (source_error_) return Error(*source_error_).wrap("reading the " + what_);
  return Error(Code::kInvalidArgument,
               what_ + ": " + archive_error_string(a_) +
                   "; expected a tar archive (optionally gzip/xz/zstd compressed)");
}

}  // namespace space::daemon
