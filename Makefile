# hearth — top-level entry points. On a fresh Debian 12 machine these install what is missing.
#   make run    install deps, build the CLI, run the default model
#   make test   install deps, build, run every test (then make asan: sanitizers, brief fuzzing)
#   make build  build into build/ (binary: build/hearth)
#   make install PREFIX=/usr/local   install hearth, its default model, the library and headers
#   make dist   a release tarball in dist/ that runs without the build dependencies
#   make fuzz   run each fuzz target for FUZZ_SECONDS (default 600; docs/testing.md)
.PHONY: deps build test test-fast asan asan-build fuzz run clean format-check install dist dist-check

BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
APT_PACKAGES = build-essential cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev \
  libutf8proc-dev libcli11-dev libfmt-dev libgtest-dev libboost-dev libedit-dev python3-numpy \
  clang libclang-rt-14-dev clang-format libcurl4-openssl-dev libssl-dev
# Seconds per fuzz target: `make asan` (hence `make test` and CI) runs each briefly.
FUZZ_SECONDS ?= 20

deps:
	@scripts/install-deps.sh $(APT_PACKAGES)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

dist: deps
	scripts/make-dist.sh

# Runs the tarball in a bare Debian chroot (root, a Debian mirror; not part of make test).
dist-check: dist
	scripts/check-dist.sh $$(ls -t dist/hearth-*.tar.gz | head -1)

test: build
	scripts/fetch-test-assets.sh
	cd $(BUILD) && ctest --output-on-failure -j 1
	$(MAKE) asan

# The sanitizer build: unit and op tests under AddressSanitizer + UBSan, and the libFuzzer targets
# of tests/fuzz, from one clang build dir so the library is compiled once for both. -O1 keeps
# the fuzzers fast; assertions stay on.
asan-build: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
	  "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DHEARTH_SANITIZE=ON -DHEARTH_FUZZ=ON -DHEARTH_BENCH=OFF \
	  -DHEARTH_CUDA=OFF
	cmake --build build-asan -j $(JOBS) --target test_unit test_ops fuzz_all

# Tests that run the trellis Viterbi encoder over whole models or many large blocks take minutes
# at -O1 under the sanitizers (together over four of CI's thirty); the release suite (make test's
# first part) runs them, and smaller trellis tests keep the encoder under the sanitizers.
ASAN_SLOW_TESTS = QuantizeTrellis.LlamaEndToEndWithAndWithoutRotation \
  QuantizeMoe.TrellisStacksLoadAsExpertsWithTheirOwnCodes TrellisEncoder.GaussianMseNearQtip \
  TrellisLdlq.IdentityHessianGivesPlainViterbi \
  TrellisLdlq.LowerProxyLossThanPlainViterbiOnCorrelatedHessian
colon := :
empty :=
space := $(empty) $(empty)
ASAN_SLOW_FILTER = $(subst $(space),$(colon),$(strip $(ASAN_SLOW_TESTS)))

asan: asan-build
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/test_unit \
	  --gtest_filter=-$(ASAN_SLOW_FILTER)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/test_ops
	scripts/fetch-test-assets.sh
	scripts/run-fuzz.sh build-asan $(FUZZ_SECONDS)

fuzz: FUZZ_SECONDS = 600
fuzz: asan-build
	scripts/fetch-test-assets.sh
	scripts/run-fuzz.sh build-asan $(FUZZ_SECONDS)

# Builds only the CLI: the first token comes minutes sooner than after `make build`.
run: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target hearth
	$(BUILD)/hearth generate -p "The Python interpreter" -n 64

# The style of .clang-format (clang-format 14, Debian 12's), over every tracked C++ and CUDA file.
format-check: deps
	clang-format --dry-run --Werror $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) build-asan build-dist dist
