# scanprop — the only entry point: build, test, bench, format.
#   make                 library build/libscanprop.a and the apps in build/
#   make test            build and run every Criterion suite and the install check (all run;
#                        fails at the end on any failure)
#   make test-asan       the same suites under AddressSanitizer + UBSan
#   make CUDA=1          also compile the CUDA backend (*.cu, *_cuda.c) with nvcc
#   make test-cuda       CUDA=1 and run the CUDA suites (needs a GPU)
#   make test-cuda-emu   the CUDA suites on the CPU, through the CUDA emulator (tests/cudaemu/)
#   make bench           time and memory against PyTorch CPU, native and AVX2-capped (docs/PERFORMANCE.md;
#                        BENCH_QUICK=1, BENCH_SECTIONS=…, BENCH_CPU=native|avx2: bench/run.sh)
#   make bench-cuda      on a GPU machine: scanprop's GPU step next to PyTorch's (docs/CUDA.md)
#   make opprof          build/opprof: per-op timers of a training step; build/ooo_bench: the
#                        ooo engine's orders against linear BP in one process (bench/ooo.sh)
#   make install PREFIX=dir   libscanprop.a, the headers (include/scanprop) and scanprop.pc
#   make BUILD=dir       build somewhere else (parallel worktrees, sanitizer builds)
#   make CC=clang        build with clang (compiler-specific flags only where accepted)
#   make build-clang     clang builds of everything, plain and SAN=1 (CI runs it)
#   make fuzz            libFuzzer targets (clang, ASan+UBSan), FUZZ_SECONDS=N each, and the page's
#                        wasm module under node (make fuzz-wasm; docs/RELIABILITY.md)
#   make site            build/site/: the teaching page, the simulator and the backward engines
#                        in WebAssembly (emcc; scripts/deps.sh site installs it; docs/TUTORIAL.md)
#   make test-site       the page in headless chromium against build/schedule and the apps; the
#                        wasm build against the native one, and hostile calls into it
#                        (tests/site/wasm_fuzz.js), under node
#   make test-tutorial   every command and quoted number of docs/TUTORIAL.md (as root and as nobody)
#   make MPI=0|1         without / with Open MPI (default: with it when mpicc is found);
#                        make test then also runs the suites under mpirun (test_comm, test_exec)

BUILD   ?= build
CC      ?= cc
NVCC    ?= nvcc
CUDA    ?= 0
SAN     ?= 0
WERROR  ?= 0

# $(call cc-option,FLAG): FLAG when $(CC) accepts it (as an error, not a warning), else
# nothing; compiler-specific flags go only to the compiler that has them (make CC=clang).
cc-option = $(shell $(CC) -Werror $(1) -x c -c /dev/null -o /dev/null >/dev/null 2>&1 && echo $(1))

# -O2 with -O3's vectoriser cost model: GCC 12's -O2 default ("very cheap") leaves
# pointwise loops of unknown length scalar, and a scalar ReLU branches on every sign.
# Vectorising maps changes no bits (no reassociation, no contraction under -std=c11).
# Clang has no such flag (its -O2 already vectorises with the full cost model).
# -fno-trapping-math: nothing here reads floating-point exception flags, and without it
# GCC keeps a compare or a float→int conversion inside a loop as a branch (it could
# trap), so the recurrent ops' branch-free exp (layers/recurrent.h) stayed scalar. It
# changes no result: no reassociation, no contraction.
OPT     ?= -O2 -g
VECT_FLAGS := $(call cc-option,-fvect-cost-model=dynamic) -fno-trapping-math
CFLAGS  += $(OPT) $(VECT_FLAGS) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -pthread -MMD -MP -I. -fno-strict-aliasing
ifeq ($(WERROR),1)
CFLAGS  += -Werror
endif
ifeq ($(SAN),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(FUZZ),1)
CFLAGS  += -fsanitize=fuzzer-no-link
endif
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
CFLAGS  += $(BLAS_CFLAGS)
LDLIBS  += $(BLAS_LIBS) -lstb -lz -lm -lpthread
# oneDNN for the convolutions (core/kernels/dnnl.c); make DNNL=0 builds the im2col path only.
DNNL    ?= 1
ifeq ($(DNNL),1)
CFLAGS  += -DSP_HAVE_DNNL
LDLIBS  += -ldnnl -lgomp
endif

# Open MPI (core/comm/comm_mpi.c): the flags mpicc would pass, so cc stays the compiler.
MPI     ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(MPI),1)
CFLAGS  += -DSP_HAVE_MPI $(shell mpicc --showme:compile)
LDLIBS  += $(shell mpicc --showme:link)
endif

# The library is every source under these folders, subfolders included (docs/ARCHITECTURE.md).
LIB_DIRS := core layers optim schedulers data train cli
LIB_SRC  := $(filter-out %_cuda.c,$(shell find $(LIB_DIRS) -name '*.c' | sort))
CUDA_SRC :=
ifeq ($(CUDA),1)
CUDA_HOME ?= /usr/local/cuda
CUDA_SRC  := $(shell find $(LIB_DIRS) -name '*.cu' -o -name '*_cuda.c' | sort)
CFLAGS    += -DSP_HAVE_CUDA -I$(CUDA_HOME)/include
NVFLAGS   ?= -O2 -std=c++17 -I. -DSP_HAVE_CUDA -arch=sm_90 -Xcompiler -Wall -MMD -MP
ifeq ($(WERROR),1)
NVFLAGS   += -Xcompiler -Werror -Werror all-warnings
endif
ifeq ($(CUDA_EMU),1)
# The CUDA emulator (tests/cudaemu/, docs/CUDA.md): .cu compiled as host C++ by
# nvcc-emu, linked against replacement cudart/cuBLAS/cuDNN/cuSPARSE built on the real headers.
NVCC      := tests/cudaemu/nvcc-emu
EMU_SAN   := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
NVFLAGS   += $(if $(filter 1,$(SAN)),$(EMU_SAN))
EMU_LIB   := $(BUILD)/libcudaemu.a
EMU_OBJ   := $(patsubst %,$(BUILD)/obj/%.o,$(wildcard tests/cudaemu/*.cc))
LDLIBS    += -lstdc++
else
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcusparse -lcublas -lcudart -lstdc++
# NCCL (core/comm/comm_nccl.cu) comes with the toolkit; the emulator has none.
CFLAGS    += -DSP_HAVE_NCCL
NVFLAGS   += -DSP_HAVE_NCCL
LDLIBS    := $(subst -lcudnn,-lnccl -lcudnn,$(LDLIBS))
endif
endif
LIB_OBJ  := $(patsubst %,$(BUILD)/obj/%.o,$(LIB_SRC) $(CUDA_SRC))
LIB      := $(BUILD)/libscanprop.a

# Each apps/*.c is one main(): its model, its flags, and a call of the runner.
APP_MAIN := $(wildcard apps/*.c)
APPS     := $(patsubst apps/%.c,$(BUILD)/%,$(APP_MAIN))

# The suites, the longest first: scripts/run_tests.sh runs two at once, so the long ones
# start early and the short ones fill in beside them.
SLOW_TESTS := test_exec test_apps test_train test_bn_parallel test_ooo test_parity test_conv test_exec_dag \
              test_apps_cuda test_ooo_cuda test_ops_cuda
slow_first = $(filter $(2),$(addprefix $(1)/tests/,$(SLOW_TESTS))) $(filter-out $(addprefix $(1)/tests/,$(SLOW_TESTS)),$(2))
TEST_SRC := $(filter-out %_cuda.c,$(wildcard tests/test_*.c))
TESTS    := $(call slow_first,$(BUILD),$(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC)))
CUDA_TEST_SRC := $(wildcard tests/test_*_cuda.c)
CUDA_TESTS    := $(call slow_first,$(BUILD),$(patsubst tests/%.c,$(BUILD)/tests/%,$(CUDA_TEST_SRC)))

# Objects built through pattern rules are kept (not deleted as intermediates).
.PRECIOUS: $(BUILD)/obj/%.c.o $(BUILD)/obj/%.cu.o
.PHONY: site test-site test-tutorial all lib apps tests test install test-long test-asan test-cuda test-cuda-emu cuda-tests bench bench-cuda opprof \
        format clean build-clang fuzz fuzz-build fuzzers fuzz-wasm
all: lib apps

lib: $(LIB)
apps: $(APPS)
tests: $(TESTS)

# Made afresh: `ar r` keeps members whose source was moved or deleted.
$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/obj/%.c.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

ifeq ($(CUDA_EMU),1)
EMU_CXXFLAGS := $(OPT) -std=c++17 -Wall -Wextra -Wno-unused-parameter -MMD -MP -I$(CUDA_HOME)/include \
                $(if $(filter 1,$(WERROR)),-Werror) \
                $(if $(filter 1,$(SAN)),$(EMU_SAN))
$(BUILD)/obj/%.cc.o: %.cc
	@mkdir -p $(@D)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
# The naive library loops (cuBLAS, cuDNN) stay -O2 and uninstrumented in the ASan build:
# they are test infrastructure, bounds-checked by their own registry checks, and the
# sanitizer would only multiply the time of every emulated convolution.
$(BUILD)/obj/tests/cudaemu/cublas.cc.o $(BUILD)/obj/tests/cudaemu/cudnn.cc.o: EMU_CXXFLAGS := \
    $(filter-out $(EMU_SAN) -O1,$(EMU_CXXFLAGS)) -O2
$(EMU_LIB): $(EMU_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^
# Linked after libscanprop.a: the programs' prerequisites end with it.
$(APPS) $(TESTS) $(CUDA_TESTS) $(BUILD)/opprof $(BUILD)/ooo_bench: $(EMU_LIB)
endif

$(BUILD)/%: $(BUILD)/obj/apps/%.c.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.c.o $(BUILD)/obj/tests/testutil.c.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -lcriterion -o $@

# Programs the MPI suites start under mpirun (test_comm, test_exec, test_exec_dag, test_bn_parallel;
# fault_demo: build/demo with the injected faults of test_exec's timeout tests).
MPI_WORKERS := $(BUILD)/tests/comm_worker $(BUILD)/tests/dag_worker $(BUILD)/tests/bn_worker $(BUILD)/tests/fault_demo
$(MPI_WORKERS): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.c.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
tests: $(MPI_WORKERS)

# Every check runs even if one fails (every suite, the install check, the architecture
# page against the tree); the exit status says whether all passed. (.ci/run checks this
# with TESTS=/bin/false.)
test: all $(TESTS) $(MPI_WORKERS)
	@st=0; BUILD=$(BUILD) ./scripts/run_tests.sh $(TESTS) || st=1; \
	BUILD=$(BUILD) SAN=$(SAN) ./scripts/test_install.sh || st=1; \
	./scripts/check_architecture.sh && echo "   check_architecture: docs/ARCHITECTURE.md matches the tree" || st=1; \
	$(TUTORIAL_CHECK) \
	[ $$st -eq 0 ] || echo "make test: FAILED (the failures are above)"; exit $$st
# docs/TUTORIAL.md's commands and numbers, as root then as nobody when run as root (about 1 min of
# CPU; its mpirun lessons need MPI; not under SAN=1)
TUTORIAL_CHECK = $(if $(filter 1,$(MPI)),$(if $(filter 1,$(SAN)),,BUILD=$(BUILD) /usr/bin/python3 scripts/check_tutorial.py docs/TUTORIAL.md || st=1;))

# The static library, headers and a pkg-config file whose Libs are this build's link line.
PREFIX ?= /usr/local
install: lib
	@./scripts/install.sh "$(PREFIX)" "$(BUILD)" "$(LDFLAGS) $(LDLIBS)"

# The long checks: the whole first epoch of the Figure 6 comparison and of ResNet-20 (≥ 0.85); the soak (2,000
# steps of each app's model and engine: no per-step leak, the engines agree).
test-long: all $(BUILD)/tests/test_train $(BUILD)/tests/test_soak $(BUILD)/tests/test_resume
	SCANPROP_FIG6_STEPS=1000000 SCANPROP_RESNET_EPOCH=1 BUILD=$(BUILD) $(BUILD)/tests/test_train --jobs=1 --verbose
	SCANPROP_SOAK_STEPS=2000 SCANPROP_SOAK_REPORT=1 $(BUILD)/tests/test_soak --jobs=1
	SCANPROP_RESUME_SLOW=1 BUILD=$(BUILD) $(BUILD)/tests/test_resume --jobs=1 --filter 'resume/resnet*'

# (tests/lsan.supp: what oneDNN and OpenMP keep for the life of the process.) Under the
# sanitizers test_exec runs every scheme once (demo_*) and every refusal, message and
# fault check, and leaves out the sweeps that run the same executor paths again on other
# models and the checks that wait out timeouts: make test runs those (ASan costs ~2× there).
ASAN_EXEC_SKIP = lenet_schemes_match_single_process|lenet_action_lists_match_single_process|lenet_v_and_auto_lists_match_single_process|schemes_train_vgg11|every_scheme_trains_rnn_and_gru|interleaving_any_m_matches_single_process|every_action_list_scheme_round_trips_through_custom|a_rank_that_hangs_mid_step_stops_the_others|a_timeout_on_an_oversubscribed_node_says_so|step_median_leaves_out_five_steps_and_stalls
test-asan:
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	SUITE_FILTER='test_exec=exec/!($(ASAN_EXEC_SKIP))' \
	  $(MAKE) BUILD=build-asan SAN=1 OPT="-O1 -g" test

# Both compilers must build everything: clang, plain and with ASan+UBSan, into their own
# directories (WERROR=1 on the command line carries over).
build-clang:
	$(MAKE) CC=clang BUILD=build-clang all opprof tests
	$(MAKE) CC=clang BUILD=build-clang-asan SAN=1 OPT="-O1 -g" all opprof tests

# Fuzzing: one libFuzzer binary per reader (tests/fuzz/targets.c), the library built
# with clang, coverage, ASan and UBSan into build-fuzz/; each runs FUZZ_SECONDS on a
# scratch copy of its seed corpus tests/fuzz/corpus/<target> (scripts/fuzz.sh).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := safetensors idx cifar seqset image costs state actions
fuzzers: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_TARGETS))
# stb_image 2.27's JPEG bit reader shifts by more than 31 once a marker cuts a scan short
# (code_bits < 0, and what it shifts is then 0): nothings/stb#1293, fixed in 2.28; not patchable in
# Debian's header nor checkable before decoding; every other check stays on
# (docs/RELIABILITY.md, corpus image/stb-jpeg-marker-mid-scan.jpg).
$(BUILD)/obj/tests/fuzz/stb_image.c.o: CFLAGS += -w -fno-sanitize=shift-exponent
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz.c tests/fuzz/targets.c $(BUILD)/obj/tests/fuzz/stb_image.c.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -DFZ_RUN=fz_$* $< \
	    $(BUILD)/obj/tests/fuzz/stb_image.c.o $(LIB) $(LDFLAGS) $(LDLIBS) -o $@
fuzz-build:
	$(MAKE) CC=clang BUILD=build-fuzz SAN=1 FUZZ=1 OPT="-O1 -g" fuzzers
fuzz: fuzz-build
	./scripts/fuzz.sh build-fuzz/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)
	$(MAKE) fuzz-wasm

# The page's WebAssembly module under hostile calls (tests/site/wasm_fuzz.js, node): seed
# after seed for FUZZ_SECONDS (make test-site runs seed 1); needs make site's build.
fuzz-wasm: site
	@end=$$(( $$(date +%s) + $(FUZZ_SECONDS) )); seed=2; st=0; \
	while [ $$(date +%s) -lt $$end ] && [ $$st -eq 0 ]; do \
	  node --no-experimental-fetch tests/site/wasm_fuzz.js $(CURDIR)/$(BUILD)/site/scanprop.js $$seed \
	    > $(BUILD)/site/wasm-fuzz.log 2>&1 || { st=1; echo "fuzz wasm: seed $$seed failed:"; tail -5 $(BUILD)/site/wasm-fuzz.log; }; \
	  seed=$$((seed + 1)); \
	done; [ $$st -eq 0 ] && echo "   wasm: seeds 2..$$((seed - 1)), $$(tail -1 $(BUILD)/site/wasm-fuzz.log)"; exit $$st

cuda-tests: $(CUDA_TESTS)

test-cuda:
	$(MAKE) CUDA=1 BUILD=build-cuda all cuda-tests
	@BUILD=build-cuda ./scripts/run_tests.sh $(patsubst $(BUILD)/%,build-cuda/%,$(CUDA_TESTS))

# The CUDA suites without a GPU (docs/CUDA.md): default, shuffled (the apps' suite apart:
# its streams are the ooo suite's, shuffled there) and protected modes,
# once more under ASan+UBSan, then the planted-bug script (each bug must be caught) and
# the GPU machine's script at tiny sizes (scripts/gpu_check.sh).
EMU_TESTS = $(patsubst $(BUILD)/%,$(1)/%,$(CUDA_TESTS))
test-cuda-emu:
	$(MAKE) CUDA=1 CUDA_EMU=1 BUILD=build-emu all cuda-tests
	@BUILD=build-emu ./scripts/run_tests.sh $(call EMU_TESTS,build-emu)
	@SCANPROP_EMU_ORDER=shuffle BUILD=build-emu ./scripts/run_tests.sh $(filter-out %/test_apps_cuda,$(call EMU_TESTS,build-emu))
	@SCANPROP_EMU_PROTECT=1 BUILD=build-emu ./scripts/run_tests.sh $(call EMU_TESTS,build-emu)
	$(MAKE) CUDA=1 CUDA_EMU=1 BUILD=build-emu-asan SAN=1 OPT="-O1 -g" all cuda-tests
	@BUILD=build-emu-asan ./scripts/run_tests.sh $(call EMU_TESTS,build-emu-asan)
	./tests/cudaemu/planted_bugs.sh
	BUILD=build-emu ./scripts/gpu_check.sh build-emu/gpu-check

# On a GPU machine: scanprop's step next to PyTorch's on the GPU (docs/CUDA.md).
bench-cuda:
	@./bench/cuda.sh --check
	$(MAKE) CUDA=1 BUILD=build-cuda all
	BUILD=build-cuda ./bench/cuda.sh

bench: all $(BUILD)/ooo_bench
	./bench/run.sh

# Per-op timers of one training step: build/opprof lenet 64 (docs/PERFORMANCE.md); the ooo
# engine's orders against linear BP, steps interleaved in one process: build/ooo_bench
# vgg11 8 40 2 (docs/OOO.md).
opprof: $(BUILD)/opprof $(BUILD)/ooo_bench
$(BUILD)/opprof: $(BUILD)/obj/bench/opprof.c.o $(LIB)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
$(BUILD)/ooo_bench: $(BUILD)/obj/bench/ooo_bench.c.o $(LIB)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# ---- the teaching page (docs/TUTORIAL.md) --------------------------------------------------
# Every figure of the page is computed in WebAssembly by the library's own code: the
# simulator (schedulers/plan/ and schedulers/sim/; not the MPI executor, schedulers/exec/) and the scan plan (schedulers/scan/)
# for the pipelines and the chain; for the zoo models' BPPSA and ooo views the tape, the
# layers, pruning and the backward engines (core/ without core/comm/, layers/, optim/,
# schedulers/backward/, no CUDA files). The wasm build
# has no oneDNN (no SP_HAVE_DNNL: conv2d's im2col path), no OpenBLAS (site/wasm_blas.c
# behind site/cblas/cblas.h), no MPI and one thread; site/wasm_api.c and
# site/wasm_models.c are its JSON face. Objects go to $(BUILD)/wasm/ (each rebuilt when
# its sources change); the normal build never runs emcc.
EMCC      ?= emcc
SITE      := $(BUILD)/site
SITE_C    := $(filter-out core/comm/% %_cuda.c,$(shell find core layers optim schedulers/backward -name '*.c' | sort)) \
             $(sort $(wildcard schedulers/scan/*.c schedulers/memory/*.c schedulers/plan/*.c schedulers/plan/gen/*.c schedulers/sim/*.c)) \
             site/wasm_api.c site/wasm_models.c site/wasm_blas.c
SITE_OBJ  := $(patsubst %.c,$(BUILD)/wasm/%.o,$(SITE_C))
SITE_EXP  := _site_schemes,_site_simulate,_site_scan_plan,_site_ooo,_site_bppsa_plan,_malloc,_free
SITE_CFLAGS := -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter $(if $(filter 1,$(WERROR)),-Werror) \
             -I. -Isite/cblas -MMD -MP
# One file, the .wasm inlined: no fetch of a second file (node, file:// and any host).
# site/wasm_call.js: Module.siteCall, the one way JavaScript calls the entry points (strings
# on the heap, not ccall's stack).
SITE_EMFLAGS := -O2 -sEXPORTED_FUNCTIONS=$(SITE_EXP) \
             -sEXPORTED_RUNTIME_METHODS=ccall,stringToUTF8,lengthBytesUTF8,UTF8ToString,stackSave,stackRestore \
             -sALLOW_MEMORY_GROWTH=1 -sSINGLE_FILE=1 -sENVIRONMENT=web,node --post-js site/wasm_call.js

$(BUILD)/wasm/%.o: %.c
	@mkdir -p $(@D)
	NODE_PATH=/usr/share/nodejs $(EMCC) $(SITE_CFLAGS) -c $< -o $@

$(SITE)/scanprop.js: $(SITE_OBJ) site/wasm_call.js
	@mkdir -p $(@D)
	NODE_PATH=/usr/share/nodejs $(EMCC) $(SITE_EMFLAGS) $(SITE_OBJ) -o $@

site: $(SITE)/scanprop.js
	@mkdir -p $(SITE)/profiles
	rm -rf $(SITE)/data
	cp site/index.html site/app.js site/style.css $(SITE)/
	cp site/profiles/*.csv $(SITE)/profiles/
	/usr/bin/python3 scripts/site_tutorial.py docs/TUTORIAL.md $(SITE)/TUTORIAL.html

test-site: site all
	BUILD=$(BUILD) /usr/bin/python3 tests/site/test_site.py

test-tutorial: all
	BUILD=$(BUILD) /usr/bin/python3 scripts/check_tutorial.py docs/TUTORIAL.md

format:
	clang-format -i $(shell find $(LIB_DIRS) apps -name '*.[ch]' -o -name '*.cu')

clean:
	rm -rf build build-asan build-cuda build-emu build-emu-asan build-clang build-clang-asan build-fuzz

-include $(shell find $(BUILD)/obj $(BUILD)/wasm -name '*.d' 2>/dev/null)
