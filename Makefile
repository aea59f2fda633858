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

.PHONY: all deps build run test bench install test-sanitize fuzz fuzz-run clean

all: build

deps:
	@scripts/deps.sh
	@scripts/pydeps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_OPTS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: generate text with a built-in default model. It is a synthetic Qwen3-MoE
# (qwen3-tiny preset) written on first use with RANDOM weights and data/demo-vocab.gguf's 4096
# tokens, so it prints random pieces of English words; point `hmoe run -m` at a real GGUF file or
# Hugging Face directory for real output.
SYNTH_MODEL ?= $(BUILD)/synth/qwen3-tiny-demo.gguf
RUN_PROMPT  ?= The capital of France is
# make bench's end-to-end model: the preset's own 151936-token vocabulary (the real output layer)
BENCH_MODEL ?= $(BUILD)/synth/qwen3-tiny.gguf
run: build
	@$(BUILD)/hmoe doctor --no-bandwidth
	@mkdir -p $(dir $(SYNTH_MODEL))
	@test -f $(SYNTH_MODEL) || $(BUILD)/hmoe synth --preset qwen3-tiny --vocab data/demo-vocab.gguf \
	    --vocab-size 4096 -o $(SYNTH_MODEL)
	@echo "== hmoe run on $(SYNTH_MODEL): RANDOM weights, expect gibberish =="
	$(BUILD)/hmoe run -m $(SYNTH_MODEL) -p "$(RUN_PROMPT)" -n 32 --temp 0.8 --top-k 40 --seed 1
	@echo "== for real output: $(BUILD)/hmoe run -m MODEL.gguf|HF_DIR -p \"...\" -n 128 =="

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# libhmoe.a, include/hmoe.h + hmoe_moe.h, the hmoe tool and lib/pkgconfig/hmoe.pc under PREFIX;
# a program then builds with `cc prog.c $(pkg-config --cflags --libs hmoe)` (examples/simple.c)
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

bench: build
	$(BUILD)/hmoe bench pool
	$(BUILD)/hmoe bench membw
	for t in q4_k q8_0 bf16; do $(BUILD)/hmoe bench kernels --type $$t --rows 768 --cols 2048 --tokens 1,4,64 || exit 1; done
	@mkdir -p $(dir $(BENCH_MODEL))
	@test -f $(BENCH_MODEL) || $(BUILD)/hmoe synth --preset qwen3-tiny --vocab none -o $(BENCH_MODEL)
	$(BUILD)/hmoe bench e2e -m $(BENCH_MODEL) -p 128 -n 32

test-sanitize: deps
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DHMOE_CUDA=OFF -DHMOE_SANITIZE=ON \
	       -DHMOE_WERROR=$(HMOE_WERROR) "-DHMOE_DEPS_PREFIX=$(HMOE_DEPS_PREFIX)" >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	@cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# libFuzzer targets (clang): `make fuzz` builds them, `make fuzz-run FUZZ_SECONDS=600` runs each
# on its kept corpus (fuzz/corpus/NAME; new inputs go to build-fuzz/corpus/NAME).
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZERS      = $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_LIB_SRC = $(wildcard src/core/*.c) src/quant/types.c $(wildcard src/format/*.c) \
               $(wildcard src/tokenizer/*.c) $(wildcard src/template/*.c) src/model/place.c \
               src/server/oai.c src/server/outparse.c src/engine/jsonp.c src/engine/sampler.c
fuzz: deps
	@mkdir -p $(FUZZ_BUILD)
	@for f in $(FUZZERS); do \
	  clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -std=c11 \
	    -D_GNU_SOURCE -DPCRE2_CODE_UNIT_WIDTH=8 -DPCRE2_STATIC -Iinclude -Isrc fuzz/fuzz_$$f.c \
	    $(FUZZ_LIB_SRC) -l:libjansson.a -l:libpcre2-8.a -l:libz.a -lpthread -lm \
	    -o $(FUZZ_BUILD)/fuzz_$$f || exit 1; echo "built $(FUZZ_BUILD)/fuzz_$$f"; done

fuzz-run: fuzz
	@for f in $(FUZZERS); do mkdir -p $(FUZZ_BUILD)/corpus/$$f; \
	  dict=; [ -f fuzz/$$f.dict ] && dict=-dict=fuzz/$$f.dict; \
	  $(FUZZ_BUILD)/fuzz_$$f $$dict -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus/$$f fuzz/corpus/$$f || exit 1; done

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(FUZZ_BUILD)
