# hearth — top-level entry points. On a fresh Debian 12 machine these install what is missing.
#   make run    install deps, build, run the default model
#   make test   install deps, build, run every test (and the sanitizer build of the unit tests)
#   make build  build into build/ (binary: build/hearth)
.PHONY: deps build test test-fast asan run clean format-check

BUILD ?= build
JOBS ?= $(shell nproc)
APT_PACKAGES = build-essential cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev \
  libutf8proc-dev libcli11-dev libfmt-dev libgtest-dev libboost-dev python3-numpy

deps:
	@scripts/install-deps.sh $(APT_PACKAGES)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	scripts/fetch-test-assets.sh
	cd $(BUILD) && ctest --output-on-failure -j 1
	$(MAKE) asan

# Unit tests under AddressSanitizer + UBSan (a separate Debug build).
asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEARTH_SANITIZE=ON -DHEARTH_BENCH=OFF -DHEARTH_CUDA=OFF
	cmake --build build-asan -j $(JOBS) --target test_unit test_ops
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/test_unit
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/test_ops

run: build
	$(BUILD)/hearth generate -p "The Python interpreter" -n 64

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) build-asan
