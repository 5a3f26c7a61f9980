# rawloop — build with `make`, test with `make test` (see README.md).
#
#   make                 build/rawloop (CPU backend; SIMD level chosen by ARCH, default native)
#   make check           everything CI runs: test + test-arm64 + test-asan + test-tsan +
#                        fuzz-short, one summary line
#   make test            unit tests, tokenizer vectors, malformed-input corpus, HF oracle (pytest)
#   make test-asan       the same suite built with AddressSanitizer + UBSan, in build-asan/
#   make fuzz            libFuzzer targets in build-fuzz/ (clang); `make fuzz-short` runs each briefly
#   make ARCH=           portable build: no -march (scalar + baseline SIMD only)
#   make test-arm64      NEON kernels: test_quant cross-built for arm64, run under qemu-aarch64
#   make test-avx512     AVX-512 kernels: test_quant built for x86-64-v4 (+VNNI), run where supported
#   make test-tsan       the thread pool's test under ThreadSanitizer

CC      ?= cc
BUILD   ?= build
ARCH    ?= -march=native
OPT     ?= -O2
SAN     ?=
PCRE_CFLAGS := $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
PCRE_LIBS   := $(shell pkg-config --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
JANSSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
# -ffp-contract=off: no fused multiply-adds the source does not write (gcc already does this
# under -std=c11; clang would fuse), so the scalar references and the K-quant search round
# every product as written: the K-quants are byte-identical to llama-quantize's only then.
CFLAGS  += -std=c11 -ffp-contract=off $(OPT) -g $(ARCH) $(WARN) -D_GNU_SOURCE -pthread $(PCRE_CFLAGS) $(SAN)
LDLIBS  += $(PCRE_LIBS) $(JANSSON_LIBS) -lm -pthread
LDFLAGS += $(SAN)

LIB_SRC  := $(wildcard src/*.c)
LIB_OBJ  := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC))

# CUDA backend (src/cuda/*.cu): built whenever nvcc is found (CUDA=auto), never with CUDA=0.
# cudart is linked statically so the binary runs wherever the driver is.
NVCC ?= $(shell command -v nvcc 2>/dev/null)
CUDA ?= auto
ifeq ($(CUDA),auto)
  CUDA := $(if $(NVCC),1,0)
endif
ifeq ($(CUDA),1)
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  CU_SRC   := $(wildcard src/cuda/*.cu)
  CU_OBJ   := $(patsubst src/cuda/%.cu,$(BUILD)/obj/cuda/%.o,$(CU_SRC))
  # -lineinfo: source lines for compute-sanitizer and ncu reports (the code is the same)
  NVFLAGS  ?= -O3 -std=c++17 -lineinfo -gencode arch=compute_90a,code=sm_90a \
              -gencode arch=compute_80,code=sm_80 -gencode arch=compute_80,code=compute_80 \
              -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter
  CFLAGS   += -DRL_HAVE_CUDA
  LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
  LIB_OBJ  += $(CU_OBJ)
  # the kernel lab (bench/lab_*.cu) is built too, so that it compiles against today's kernels
  CUDA_TEST := $(BUILD)/test_cuda $(BUILD)/racecheck_probe $(patsubst bench/%.cu,$(BUILD)/%,$(wildcard bench/lab_*.cu)) \
               $(BUILD)/test_cursor
endif
CLI_SRC  := $(wildcard cli/*.c)
CLI_OBJ  := $(patsubst cli/%.c,$(BUILD)/obj/cli/%.o,$(CLI_SRC))
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(patsubst tests/unit/%.c,$(BUILD)/%,$(TEST_SRC))
DEPS     := $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

.PHONY: all check test test-asan units benches lab lab-needs-nvcc fuzz fuzz-short clean
all: $(BUILD)/rawloop $(TEST_BIN) $(CUDA_TEST)

$(BUILD)/obj/%.o: src/%.c | $(BUILD)/obj
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/cli/%.o: cli/%.c | $(BUILD)/obj/cli
	$(CC) $(CFLAGS) -Isrc -MMD -MP -c $< -o $@
$(BUILD)/obj/cuda/%.o: src/cuda/%.cu $(wildcard src/cuda/*.h src/cuda/*.cuh) src/backend.h src/model.h | $(BUILD)/obj/cuda
	$(NVCC) $(NVFLAGS) -Isrc -c $< -o $@
$(BUILD)/obj/cuda:
	mkdir -p $@
# backend.c compiles differently with and without CUDA: rebuild it when CUDA= changes
$(BUILD)/obj/backend.o: $(BUILD)/obj/cuda-$(CUDA).stamp
$(BUILD)/obj/cuda-$(CUDA).stamp: | $(BUILD)/obj
	rm -f $(BUILD)/obj/cuda-*.stamp && touch $@
# GPU test program (run on a machine with a GPU: tests/cuda/run_device.sh)
$(BUILD)/test_cuda: tests/cuda/test_cuda.c tests/unit/check.h $(BUILD)/librawloop.a
	$(CC) $(CFLAGS) -Isrc -Isrc/cuda -Itests/unit $< $(BUILD)/librawloop.a -o $@ $(LDFLAGS) $(LDLIBS)
# the streamed matvec's copy cursor walked on the host: runs without a GPU (tests/py/test_units.py)
$(BUILD)/test_cursor: tests/cuda/test_cursor.cu tests/unit/check.h $(wildcard src/cuda/*.h src/cuda/*.cuh) | $(BUILD)/obj
	$(NVCC) $(NVFLAGS) -Isrc -Isrc/cuda -Itests/unit $< -o $@
# racecheck's report on the persistent kernel, reproduced on a race-free kernel (stage s)
$(BUILD)/racecheck_probe: tests/cuda/racecheck_probe.cu | $(BUILD)/obj
	$(NVCC) $(NVFLAGS) $< -o $@
$(BUILD)/librawloop.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/rawloop: $(CLI_OBJ) $(BUILD)/librawloop.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/test_%: tests/unit/test_%.c tests/unit/check.h $(BUILD)/librawloop.a
	$(CC) $(CFLAGS) -Isrc -Itests/unit $< $(BUILD)/librawloop.a -o $@ $(LDFLAGS) $(LDLIBS)
$(BUILD)/obj $(BUILD)/obj/cli:
	mkdir -p $@

units: $(TEST_BIN)

# Micro-benchmarks (bench/bench_*.c): not part of the test suite.
BENCH_SRC := $(wildcard bench/bench_*.c)
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/%,$(BENCH_SRC))
benches: $(BENCH_BIN)
$(BUILD)/bench_%: bench/bench_%.c $(BUILD)/librawloop.a
	$(CC) $(CFLAGS) -Isrc $< $(BUILD)/librawloop.a -o $@ $(LDFLAGS) $(LDLIBS)

# GPU kernel lab (bench/lab_*.cu): built with nvcc, run on a device; not part of the test suite.
LAB_SRC := $(wildcard bench/lab_*.cu)
LAB_BIN := $(patsubst bench/%.cu,$(BUILD)/%,$(LAB_SRC))
lab: $(if $(filter 1,$(CUDA)),$(LAB_BIN),lab-needs-nvcc)
lab-needs-nvcc:
	@echo "make lab: the kernel lab needs nvcc (CUDA=1)" >&2; exit 1
$(BUILD)/lab_%: bench/lab_%.cu bench/lab.cuh $(BUILD)/librawloop.a
	$(NVCC) $(NVFLAGS) -Isrc -Isrc/cuda $< $(BUILD)/librawloop.a -o $@ -lpcre2-8 -ljansson -lm

check:
	bash tests/run_all.sh

# The whole suite; pytest prints the closing "N passed" line CI reads.
test: all
	RAWLOOP_BUILD=$(BUILD) python3 -m pytest -q tests/py

# Same suite under ASan+UBSan (the HF oracle's slowest cases are marked `slow` and skipped).
# Host code only (CUDA=0): the sanitizers do not see into device code, and the static CUDA
# runtime is not built for them.
test-asan:
	$(MAKE) BUILD=build-asan CUDA=0 OPT=-O1 SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" all
	RAWLOOP_BUILD=build-asan ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		python3 -m pytest -q -m "not slow" tests/py

# The thread pool (its seqlock, claims and late workers) under ThreadSanitizer, host code only:
# tests/unit/test_pool.c with src/pool.c; a report exits non-zero.
.PHONY: test-tsan
test-tsan:
	@mkdir -p $(BUILD)/tsan
	$(CC) -std=c11 -O1 -g $(WARN) -D_GNU_SOURCE -pthread -fsanitize=thread -Isrc -Itests/unit \
	  tests/unit/test_pool.c src/pool.c src/err.c -o $(BUILD)/tsan/test_pool
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/tsan/test_pool

# NEON kernels (src/mm_neon.c) on arm64: test_quant cross-built for baseline armv8-a and for
# armv8.2-a+dotprod, run under qemu-aarch64 (Debian: gcc-aarch64-linux-gnu qemu-user). Only
# the sources test_quant needs, so no arm64 PCRE2. Each binary counts as one test in the
# closing "N passed, M failed" line that tests/run_all.sh reads.
ARM64_CC   ?= aarch64-linux-gnu-gcc
ARM64_QEMU ?= qemu-aarch64
ARM64_SRC  := tests/unit/test_quant.c src/quant.c src/mm.c src/mm_neon.c src/types.c src/err.c
.PHONY: test-arm64
test-arm64:
	@command -v $(ARM64_CC) >/dev/null && command -v $(ARM64_QEMU) >/dev/null || \
	  { echo "test-arm64 needs $(ARM64_CC) and $(ARM64_QEMU) (apt-get install gcc-aarch64-linux-gnu qemu-user)"; \
	    echo "0 passed, 1 failed"; exit 1; }
	@mkdir -p $(BUILD)/arm64; p=0; f=0; \
	for a in armv8-a armv8.2-a+dotprod; do \
	  bin=$(BUILD)/arm64/test_quant-$$(echo $$a | tr + -); \
	  echo "== test_quant -march=$$a under $(ARM64_QEMU)"; \
	  if $(ARM64_CC) -std=c11 $(OPT) -g -march=$$a $(WARN) -D_GNU_SOURCE -static -Isrc -Itests/unit \
	       $(ARM64_SRC) -o $$bin -lm && $(ARM64_QEMU) $$bin; then p=$$((p + 1)); else f=$$((f + 1)); fi; \
	done; echo "$$p passed, $$f failed"; [ $$f -eq 0 ]

# AVX-512 kernels (src/mm_avx512.c): test_quant for x86-64-v4 with and without VNNI, static, run
# only where /proc/cpuinfo lists the instructions (this CI machine has none: not in make check).
AVX512_SRC := $(ARM64_SRC) src/mm_avx512.c
.PHONY: test-avx512
test-avx512:
	@mkdir -p $(BUILD)/avx512; \
	for v in "test_quant:" "test_quant_vnni:-mavx512vnni"; do \
	  echo "== build $(BUILD)/avx512/$${v%%:*} (-march=x86-64-v4 $${v#*:})"; \
	  $(CC) -std=c11 -O2 -g -march=x86-64-v4 $${v#*:} $(WARN) -D_GNU_SOURCE -static -Isrc -Itests/unit \
	    $(AVX512_SRC) -o $(BUILD)/avx512/$${v%%:*} -lm || { echo "0 passed, 1 failed"; exit 1; }; \
	done; \
	flags=" $$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "; \
	for f in avx512f avx512bw avx512vl; do \
	  case "$$flags" in *" $$f "*) ;; *) echo "SKIPPED: this CPU lacks AVX-512 ($$f)"; exit 0;; esac; \
	done; p=0; f=0; \
	for b in test_quant test_quant_vnni; do \
	  if [ $$b = test_quant_vnni ]; then case "$$flags" in *" avx512_vnni "*) ;; \
	    *) echo "== $$b SKIPPED: this CPU lacks AVX512-VNNI"; continue;; esac; fi; \
	  echo "== run $(BUILD)/avx512/$$b"; \
	  if $(BUILD)/avx512/$$b; then p=$$((p + 1)); else f=$$((f + 1)); fi; \
	done; echo "$$p passed, $$f failed"; [ $$f -eq 0 ]

FUZZ_CC    ?= clang
FUZZ_SRC   := $(wildcard fuzz/fuzz_*.c)
FUZZ_BIN   := $(patsubst fuzz/%.c,build-fuzz/%,$(FUZZ_SRC))
FUZZ_FLAGS := -std=c11 -O1 -g -D_GNU_SOURCE -DRL_FUZZING -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=all $(PCRE_CFLAGS) -Isrc -pthread
fuzz: $(FUZZ_BIN)
build-fuzz/fuzz_%: fuzz/fuzz_%.c $(LIB_SRC) $(wildcard src/*.h)
	mkdir -p build-fuzz && $(FUZZ_CC) $(FUZZ_FLAGS) $< $(LIB_SRC) -o $@ $(PCRE_LIBS) $(JANSSON_LIBS) -lm
# A short run of each target from its seed corpus (CI); FUZZ_SECONDS=3600 for a long run.
FUZZ_SECONDS ?= 30
fuzz-short: fuzz
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); mkdir -p build-fuzz/corpus-$$n; \
	  echo "== $$n for $(FUZZ_SECONDS) s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
	      build-fuzz/corpus-$$n fuzz/seeds/$${n#fuzz_} || exit 1; done

clean:
	rm -rf build build-asan build-fuzz

-include $(DEPS)
