// Included first by every file of the targets that log with spdlog: in their shared precompiled
// header, or by -include where there is none (CMakeLists.txt, SPACE_PCH).
// spdlog formats each message through fmt::detail::vformat_to<char>, a function template that
// fmt 9's format.h defines but does not declare extern, so every translation unit that logs
// instantiated it again, with all of fmt's integer and floating-point formatting, and compiled
// it at -O2 (3 to 7 s of CPU per unity batch on the 2-core build VM). Debian's shared libfmt
// exports that very instantiation (format.cc instantiates it); declaring it extern here makes
// each unit call the library's copy instead. Limited to fmt 9 (Debian 12's 9.1), where that was
// checked (nm -D libfmt.so.9); other versions compile as before.
#pragma once
#include <fmt/format.h>

#if !defined(FMT_HEADER_ONLY) && FMT_VERSION >= 90000 && FMT_VERSION < 100000
FMT_BEGIN_NAMESPACE
namespace detail {
extern template FMT_API void vformat_to<char>(buffer<char>&, basic_string_view<char>,
                                              basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                              locale_ref);
}  // namespace detail
FMT_END_NAMESPACE
#endif
