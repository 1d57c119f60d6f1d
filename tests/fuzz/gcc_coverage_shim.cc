// Lets libFuzzer (LLVM's libclang_rt.fuzzer) drive code compiled by GCC. Debian 12's clang 14
// cannot compile this project (libstdc++ 12's <expected> needs P0848 conditionally trivial
// special members, clang 16+), and GCC only offers -fsanitize-coverage=trace-pc, which
// libFuzzer no longer accepts. This shim receives GCC's __sanitizer_cov_trace_pc callbacks
// (renamed with -Wl,--wrap so libFuzzer's refusing stub is bypassed) and turns them into
// AFL-style edge hits in an 8-bit counter array registered with libFuzzer as if the compiler
// had emitted inline 8-bit counters. trace-cmp callbacks go to libFuzzer directly.
// Compiled without instrumentation.
#include <cstddef>
#include <cstdint>

extern "C" void __sanitizer_cov_8bit_counters_init(uint8_t* start, uint8_t* stop);

namespace {

constexpr size_t kCounters = 1 << 16;
uint8_t counters[kCounters];
thread_local uintptr_t previous;

struct Register {
  Register() { __sanitizer_cov_8bit_counters_init(counters, counters + kCounters); }
} register_counters;

}  // namespace

extern "C" __attribute__((no_sanitize("address", "undefined"))) void
__wrap___sanitizer_cov_trace_pc() {
  uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  uintptr_t cur = (pc ^ (pc >> 15)) & (kCounters - 1);
  counters[cur ^ previous]++;
  previous = cur >> 1;
}

// GCC's trace-cmp also reports floating-point comparisons, which libFuzzer has no hook for.
extern "C" void __sanitizer_cov_trace_cmpf(float, float) {}
extern "C" void __sanitizer_cov_trace_cmpd(double, double) {}
