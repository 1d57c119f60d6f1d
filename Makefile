# SPACE build entry points. A thin layer over CMake + Ninja + CTest: every target that builds
# first makes sure the Debian packages are there (scripts/install-deps.sh, ~50 ms when they are).
#
#   make run         the run group of deps + space, spaced (+ space-egress) and space-agent only + a demo task in
#                    a fresh sandbox, timing each phase (scripts/run.sh); the build shows its
#                    progress and the time left by an estimate from its measured CPU time
#   make test        all deps + the whole build with warnings as errors (tests, microVM guest)
#                    + the parsers' unit tests and fuzz corpora under ASan/UBSan (check-asan-gate)
#                    + every test suite through
#                    ctest: the lint gates (format, layers), unit, integration, security, hosts
#                    smoke. Any warning, sanitizer finding, format or layering slip fails it
#                    (docs/ci.md); ~30 minutes on 2 cores (~5 of them the sanitizer gate)
#   make test-kvm    build + the firecracker runtime end to end and the escape suite against
#                    it (a KVM host with firecracker and jailer; elsewhere skipped, saying why)
#   make crash-soak  build + the crash suite with a long random-kill soak (SOAK_ROUNDS=40
#                    rounds of SOAK_CLIENTS=12 clients; docs/crash-safety.md)
#   make guest       only the microVM guest kernel + initramfs ($(BUILD_DIR)/guest; `build` makes it too)
#   make bench       bench deps (install-deps.sh --bench: mitmproxy, bwrap, crun, runsc) +
#                    release build + bench/run.sh (writes bench/results/<date>.md,
#                    egress-<date>.md, snapshot-<date>.md)
#   make check-asan  ASan/UBSan build in build-asan (-O1, unity batches) + every unit test and
#                    fuzz corpus replay (ctest -L unit); ~25 min of build on 2 cores
#   make check-asan-gate  the same for the code that parses hostile bytes only (the gateway's
#                    and the snapshot store's unit tests, 11 of 13 corpora); part of `make test`
#   make fuzz        libFuzzer builds of tests/fuzz in build-fuzz, each run FUZZ_SECONDS (60)
#   make format      clang-format 14 every C/C++ file in place (scripts/check-format.sh checks)
#   make build-profile  a fresh build of `make run`'s programs in build-profile with every step
#                    timed: total CPU, critical path, costliest steps (scripts/build-profile.sh)
#   make clean       remove the build directories

BUILD_DIR   ?= build
ASAN_DIR    ?= build-asan
RELEASE_DIR ?= build-release
FUZZ_DIR    ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := frame_decoder api_request agent_request agent_conn upper_listing exec_report \
                tls_hello dns host http_request qmp firecracker_api snapshot_manifest e2b_wire \
                egress_wire oci_manifest layer_tar dockerfile
# Release is -O2 without debug info here (CMakeLists.txt): debug info made the build ~25%
# slower on 2 cores; `make check-asan` builds with it.
BUILD_TYPE  ?= Release
# The build machine has 2 cores; ninja's default (cores + 2) is fine, override with JOBS=N.
JOBS        ?=
# Test parallelism. Every integration suite runs its own daemon on a private socket and state
# dir, so suites may overlap; 2 keeps `make test` well inside 30 minutes on 2 cores.
CTEST_JOBS  ?= 2

NINJA_FLAGS := $(if $(JOBS),-j$(JOBS),)
# Pinned: the format check (ctest lint.format) uses clang-format 14 too, Debian 12's.
CLANG_FORMAT ?= clang-format-14
# The sanitizer build's flags: -O1, as AddressSanitizer's documentation advises (reasonable
# speed, exact reports), and line tables only (-g1), enough for its stack traces and quicker to
# build than full debug info.
ASAN_FLAGS  ?= -O1 -g1
# Warnings as errors (SPACE_WERROR): `make test` turns it on; empty leaves a build directory's
# setting as it is (off in a fresh one, as `make run` configures it: a user's newer compiler
# may warn where GCC 12 does not).
WERROR      ?=

.PHONY: all deps deps-bench configure build guest run test test-kvm crash-soak bench clean \
        check-asan build-profile \
        check-asan-gate format fuzz

all: build

deps:
	@scripts/install-deps.sh

# deps plus the bench-only group (peers the benchmarks compare against); only `make bench`.
deps-bench:
	@scripts/install-deps.sh --bench

# Tests on: a build directory that `make run` configured without them is switched over (the
# libraries' objects stay; only the test targets are added).
configure: deps
	@if ! grep -qs '^SPACE_TESTS:BOOL=ON' $(BUILD_DIR)/CMakeCache.txt || \
	    { [ -n "$(WERROR)" ] && \
	      ! grep -qs '^SPACE_WERROR:BOOL=$(WERROR)$$' $(BUILD_DIR)/CMakeCache.txt; }; then \
	  cmake -G Ninja -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DSPACE_TESTS=ON \
	    $(if $(WERROR),-DSPACE_WERROR=$(WERROR)); fi

build: configure
	ninja -C $(BUILD_DIR) $(NINJA_FLAGS)
	@scripts/guest-kernel.sh $(BUILD_DIR)/guest $(BUILD_DIR)/space-vminit

# Only the microVM guest (kernel + initramfs, docs/vm-guest.md) in $(BUILD_DIR)/guest: Debian's
# kernel package is downloaded once and cached there; later runs only compare timestamps.
guest: configure
	ninja -C $(BUILD_DIR) $(NINJA_FLAGS) space-vminit
	@scripts/guest-kernel.sh $(BUILD_DIR)/guest $(BUILD_DIR)/space-vminit

run:
	@BUILD_DIR=$(BUILD_DIR) BUILD_TYPE=$(BUILD_TYPE) JOBS=$(JOBS) scripts/run.sh

# The gates first (docs/ci.md): the build with -Werror, then the unit tests under ASan/UBSan,
# then every suite; ctest's summary line, which CI reads, is the last one printed.
test: WERROR = ON
test: build check-asan-gate
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(CTEST_JOBS)

test-kvm: build
	@scripts/test-kvm.sh $(BUILD_DIR)

# The crash suite's random-kill soak, longer than make test's 6 rounds of 4 clients
# (docs/crash-safety.md): SOAK_ROUNDS rounds of SOAK_CLIENTS clients, spaced SIGKILLed in each.
SOAK_ROUNDS  ?= 40
SOAK_CLIENTS ?= 12
crash-soak: build
	cd tests/integration && SPACE_BUILD_DIR=$(abspath $(BUILD_DIR)) \
	  SPACE_CRASH_SOAK_ROUNDS=$(SOAK_ROUNDS) SPACE_CRASH_SOAK_CLIENTS=$(SOAK_CLIENTS) \
	  python3 test_crash.py -v CrashSoakTest

bench: deps-bench
	cmake -G Ninja -S . -B $(RELEASE_DIR) -DCMAKE_BUILD_TYPE=Release -DSPACE_TESTS=OFF
	ninja -C $(RELEASE_DIR) $(NINJA_FLAGS) space spaced space-agent
	BUILD_DIR=$(RELEASE_DIR) bench/run.sh

# Every unit test and fuzz corpus under ASan+UBSan (the whole tree built sanitized: ~25 min on
# 2 cores).
ASAN_ALL_TARGETS := space_unit_tests space_egress_tests space_snapshot_tests space_cluster_tests \
  space_image_tests \
  $(addprefix fuzz_replay_,$(FUZZ_TARGETS))
check-asan: deps
	cmake -G Ninja -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DSPACE_SANITIZE=ON \
	  -DSPACE_TESTS=ON "-DCMAKE_CXX_FLAGS_DEBUG=$(ASAN_FLAGS)" "-DCMAKE_C_FLAGS_DEBUG=$(ASAN_FLAGS)"
	ninja -C $(ASAN_DIR) $(NINJA_FLAGS) $(ASAN_ALL_TARGETS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_DIR) --output-on-failure -L unit -j$(CTEST_JOBS)

# make test's sanitizer gate: the code that parses hostile bytes, under ASan+UBSan: the
# gateway's, the snapshot store's and the image reader's unit tests and every fuzz corpus whose
# target does not link the whole daemon (agent_conn does; `make check-asan` runs it; api_request
# links the api library only, which no longer pulls the daemon in; the unit-test binaries not
# built here are left out by name). Built at -O0 (compile time is the gate's cost; the
# sanitizers report the same bugs).
ASAN_GATE_FUZZ := $(filter-out agent_conn,$(FUZZ_TARGETS))
ASAN_GATE_FLAGS ?= -O0 -g1
check-asan-gate: deps
	cmake -G Ninja -S . -B $(ASAN_DIR)-gate -DCMAKE_BUILD_TYPE=Debug -DSPACE_SANITIZE=ON \
	  -DSPACE_TESTS=ON "-DCMAKE_CXX_FLAGS_DEBUG=$(ASAN_GATE_FLAGS)" \
	  "-DCMAKE_C_FLAGS_DEBUG=$(ASAN_GATE_FLAGS)"
	ninja -C $(ASAN_DIR)-gate $(NINJA_FLAGS) space_egress_tests space_snapshot_tests \
	  space_image_tests $(addprefix fuzz_replay_,$(ASAN_GATE_FUZZ))
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_DIR)-gate --output-on-failure -j$(CTEST_JOBS) -L unit \
	  -E '_NOT_BUILT$$|^fuzz\.agent_conn$$'

# Fuzzers write what they find to $(FUZZ_DIR)/work/<target> (the seed corpus in
# tests/fuzz/corpus/ is only read) and crashes to $(FUZZ_DIR)/artifacts/<target>/.
fuzz: deps
	cmake -G Ninja -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPACE_FUZZ=ON -DSPACE_UNITY=OFF
	ninja -C $(FUZZ_DIR) $(NINJA_FLAGS) space_fuzzers
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/work/$$t $(FUZZ_DIR)/artifacts/$$t && \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS)s" && \
	  dict=$$(test -f tests/fuzz/$$t.dict && echo -dict=tests/fuzz/$$t.dict); \
	  $(FUZZ_DIR)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$dict \
	    -artifact_prefix=$(FUZZ_DIR)/artifacts/$$t/ $(FUZZ_DIR)/work/$$t tests/fuzz/corpus/$$t \
	    || exit 1; \
	done

build-profile:
	@scripts/install-deps.sh --run
	scripts/build-profile.sh -o build-profile

format:
	find src tests bench -name '*.h' -o -name '*.cc' -o -name '*.c' | xargs -r $(CLANG_FORMAT) -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(ASAN_DIR)-gate $(RELEASE_DIR) $(FUZZ_DIR) build-profile

# make test-hosts: build + the pure cgroup v2 host matrix (tests/hosts, docs/hosts.md) under
# QEMU TCG: a systemd guest (deploy/systemd/spaced.service) and two plain-init guests (spaced
# in the root cgroup, in a delegated one); every check, 50 create/destroy cycles each. Results
# in $(BUILD_DIR)/Testing/hosts/<variant>/.
.PHONY: test-hosts
test-hosts: build
	python3 tests/hosts/run_hosts.py --build-dir $(BUILD_DIR) --cycles 50
