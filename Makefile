# Thin front-end over CMake. `make run` and `make test` do all set-up on a fresh machine.
MAKEFLAGS  += --no-print-directory
BUILD      ?= build
SAN_BUILD  ?= build-san
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# HMOE_CUDA=AUTO|ON|OFF, HMOE_CUDA_ARCH=90 (one GPU arch for quick device builds), HMOE_WERROR=ON
HMOE_CUDA      ?= AUTO
HMOE_CUDA_ARCH ?= 80;86;89;90
HMOE_WERROR    ?= $(if $(CI),ON,OFF)
HMOE_DEPS_PREFIX ?=
CMAKE_ARGS ?=
CMAKE_OPTS = -DCMAKE_BUILD_TYPE=Release -DHMOE_CUDA=$(HMOE_CUDA) "-DHMOE_CUDA_ARCH=$(HMOE_CUDA_ARCH)" \
             -DHMOE_WERROR=$(HMOE_WERROR) \
             "-DHMOE_DEPS_PREFIX=$(HMOE_DEPS_PREFIX)" $(CMAKE_ARGS)

.PHONY: all deps build run test bench test-sanitize cuda-check clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_OPTS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# For now the main job is the machine check; later it runs the engine on a built-in model.
run: build
	$(BUILD)/hmoe doctor

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD)/hmoe bench pool
	$(BUILD)/hmoe bench membw

test-sanitize: deps
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DHMOE_CUDA=OFF -DHMOE_SANITIZE=ON \
	       -DHMOE_WERROR=$(HMOE_WERROR) "-DHMOE_DEPS_PREFIX=$(HMOE_DEPS_PREFIX)" >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	@cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
