// While an image layer is read or written (layer.cc, layer_writer.cc), the calling thread uses
// the C.UTF-8 locale: libarchive converts pax names (UTF-8, by the standard) from and to the
// current locale's charset, which in spaced (no setlocale: "C", ASCII) fails for every non-ASCII
// name. Under C.UTF-8 UTF-8 names pass unchanged; ustar/GNU names and names that are not UTF-8
// (pax hdrcharset=BINARY) are raw bytes either way. Without C.UTF-8 (glibc before 2.35) nothing
// changes.
#pragma once

#include <locale.h>

namespace space::image {

class Utf8Locale {
 public:
  Utf8Locale() : loc_(::newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t{})) {
    if (loc_) old_ = ::uselocale(loc_);
  }
  ~Utf8Locale() {
    if (!loc_) return;
    ::uselocale(old_);
    ::freelocale(loc_);
  }
  Utf8Locale(const Utf8Locale&) = delete;
  Utf8Locale& operator=(const Utf8Locale&) = delete;

 private:
  locale_t loc_;
  locale_t old_ = LC_GLOBAL_LOCALE;
};

}  // namespace space::image
