# CUDA-on-CPU emulator (docs/emulator.md).
#
# Libraries
#   build/libemu.a         cudart + execution engine + cuBLAS/cuBLASLt (link with $(EMU_LIBS))
#   build/libemu_nccl.a    NCCL over MPI or local sockets (link with $(EMU_MPI_LIBS))
#   build/asan/libemu.a    the same as libemu.a built with AddressSanitizer
#
# Include paths
#   $(EMU_CUDA_INC)    the toolkit's headers: host code of the emulated build (cudart,
#                      cuBLAS, NCCL declarations, which the libraries above implement)
#   $(EMU_KERNEL_INC)  CUDA sources compiled by g++: emu/include/ first, so the CUDA
#                      headers they name (<cuda_runtime.h>, <cooperative_groups.h>,
#                      <mma.h>) bring the emulator's device surface; the rest (<cuda_bf16.h>,
#                      <cublasLt.h>, ...) are the toolkit's. Production code names only
#                      CUDA's headers; only this flag maps them to the emulator.
#
# Recipes any module can use for its kernel tests
#   emulation:  objects get  CPPFLAGS += $(EMU_KERNEL_INC)  (the .cu -> build/X.cu.o rule
#               of the top-level Makefile compiles them as C++), link $(EMU_LIB) $(EMU_LIBS)
#   ASan:       build/asan/X.o / build/asan/X.cu.o from X.cpp / X.cu (rules below),
#               link with $(EMU_SANITIZE) $(EMU_ASAN_LIB) $(EMU_LIBS)
#   nvcc:       build/nvcc/sm_80/X.o and build/nvcc/sm_90/X.o from X.cu; the
#               --resource-usage report lands next to the object as X.resource.txt

EMU_CUDA_INC   := -isystem $(CUDA_HOME)/include
EMU_KERNEL_INC := -Iemu/include $(EMU_CUDA_INC)
EMU_MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell mpicxx --showme:compile 2>/dev/null)) -DOMPI_SKIP_MPICXX=1
EMU_MPI_LIBS   := $(shell mpicxx --showme:link 2>/dev/null)
EMU_LIBS       := -lboost_context
# ASan plus UBSan's alignment check, fatal: a misaligned raw access (a float4 through
# reinterpret_cast 8 bytes past a 16-byte boundary) is reported with file:line, as a
# GPU would fault on it, instead of running.
EMU_SANITIZE   := -fsanitize=address,alignment -fno-sanitize-recover=alignment
EMU_ASAN_FLAGS := -O1 -g $(EMU_SANITIZE) -fno-omit-frame-pointer
EMU_NVCC_FLAGS := -std=c++17 -O3 --resource-usage -I.
EMU_NVCC_ARCHS := sm_80 sm_90

EMU_LIB      := $(BUILD)/libemu.a
EMU_ASAN_LIB := $(BUILD)/asan/libemu.a
EMU_NCCL_LIB := $(BUILD)/libemu_nccl.a

EMU_SRCS      := emu/exec.cpp emu/cudart.cpp emu/cublas.cpp emu/cublaslt.cpp emu/launch_bounds.cpp emu/faults.cpp emu/symbols.cpp emu/settings.cpp \
                 emu/streams.cpp emu/gemm.cpp $(if $(CUDNN_INC_DIR),emu/cudnn.cpp emu/cudnn_graph.cpp)
EMU_OBJS      := $(EMU_SRCS:%.cpp=$(BUILD)/%.o)
EMU_ASAN_OBJS := $(EMU_SRCS:%.cpp=$(BUILD)/asan/%.o)

$(EMU_OBJS) $(BUILD)/emu/nccl.o $(BUILD)/emu/nccl_socket.o $(BUILD)/emu/nccl_faults.o: CPPFLAGS += $(EMU_CUDA_INC)
$(BUILD)/emu/nccl.o $(BUILD)/emu/nccl_socket.o $(BUILD)/emu/nccl_faults.o: CPPFLAGS += $(EMU_MPI_CFLAGS)

$(EMU_LIB): $(EMU_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# The GEMM core stays optimised in the ASan library too (its loops are
# bounds-checked by construction and hold the emulated tests' GEMM time); the
# fma chain gives the same bits at any optimisation level.
$(BUILD)/asan/emu/gemm.o: EMU_ASAN_FLAGS := $(OPT) -g $(EMU_SANITIZE) -fno-omit-frame-pointer

$(EMU_ASAN_LIB): $(EMU_ASAN_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

$(EMU_NCCL_LIB): $(BUILD)/emu/nccl.o $(BUILD)/emu/nccl_socket.o $(BUILD)/emu/nccl_faults.o
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# ---- ASan variant of any C++/CUDA source ------------------------------------------------------
$(BUILD)/asan/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CUDA_INC) $(CXXSTD) $(EMU_ASAN_FLAGS) $(WARN) -fopenmp -pthread -c $< -o $@

$(BUILD)/asan/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_KERNEL_INC) $(CXXSTD) $(EMU_ASAN_FLAGS) $(WARN) -fopenmp -pthread -x c++ -c $< -o $@

# ---- nvcc builds of CUDA sources (resource usage recorded next to the object) ------------------
define EMU_NVCC_RULE
$(BUILD)/nvcc/$(1)/%.o: %.cu
	@mkdir -p $$(@D)
	$(NVCC) $(EMU_NVCC_FLAGS) -arch=$(1) -MMD -MF $$(@:.o=.d) -c $$< -o $$@ > $$(@:.o=.resource.txt) 2>&1 \
	  || { cat $$(@:.o=.resource.txt); exit 1; }
endef
$(foreach arch,$(EMU_NVCC_ARCHS),$(eval $(call EMU_NVCC_RULE,$(arch))))

# The emulator's own test kernels under nvcc (few files: nvcc is slow on 2 cores).
EMU_NVCC_SOURCES := test/emu/kernels.cu test/emu/ptx_kernels.cu
EMU_NVCC_OBJS    := $(foreach arch,$(EMU_NVCC_ARCHS),$(EMU_NVCC_SOURCES:%.cu=$(BUILD)/nvcc/$(arch)/%.o))
EMU_RESOURCE_USAGE := $(BUILD)/emu/nvcc_resource_usage.txt

$(EMU_RESOURCE_USAGE): $(EMU_NVCC_OBJS)
	@mkdir -p $(@D)
	@for o in $^; do echo "== $$o"; grep -E "Compiling entry|Used [0-9]+ registers|stack frame" $${o%.o}.resource.txt \
	  | sed -E "s/.*Compiling entry function '([^']+)' for '([^']+)'.*/\2 \1/" | c++filt; done > $@
	@echo "resource usage -> $@"

emu-nvcc: $(EMU_RESOURCE_USAGE)

# ---- self-tests ---------------------------------------------------------------------------------
EMU_TEST_CPP     := test/emu/exec_test.cpp test/emu/bf16_test.cpp test/emu/cudart_test.cpp test/emu/cublas_test.cpp \
                    test/emu/streams_test.cpp test/emu/ptx_test.cpp
EMU_TEST_CU      := test/emu/kernels.cu test/emu/ptx_kernels.cu
EMU_TEST_OBJS    := $(EMU_TEST_CPP:%.cpp=$(BUILD)/%.o) $(EMU_TEST_CU:%.cu=$(BUILD)/%.cu.o)
EMU_TEST_ASAN_OBJS := $(EMU_TEST_CPP:%.cpp=$(BUILD)/asan/%.o) $(EMU_TEST_CU:%.cu=$(BUILD)/asan/%.cu.o)

$(EMU_TEST_OBJS) $(BUILD)/dev/emu/bench_emu.o: CPPFLAGS += $(EMU_KERNEL_INC)
$(EMU_TEST_ASAN_OBJS): CPPFLAGS += -Iemu/include
$(BUILD)/test/emu/nccl_test.o: CPPFLAGS += $(EMU_CUDA_INC)
$(BUILD)/test/emu/nccl_test.o: CPPFLAGS += $(EMU_MPI_CFLAGS)

$(BUILD)/test/emu/emu_test: $(EMU_TEST_OBJS) $(EMU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(EMU_LIBS) -lgtest -lgtest_main -o $@

$(BUILD)/test/emu/emu_asan_test: $(EMU_TEST_ASAN_OBJS) $(EMU_ASAN_LIB)
	@mkdir -p $(@D)
	$(CXX) $(EMU_SANITIZE) $(LDFLAGS) $^ $(EMU_LIBS) -lgtest -lgtest_main -o $@

# A kernel that writes one element past its allocation: ASan must name the line.
$(BUILD)/test/emu/emu_oob_asan: $(BUILD)/asan/test/emu/oob_kernel.cu.o $(EMU_ASAN_LIB)
	@mkdir -p $(@D)
	$(CXX) $(EMU_SANITIZE) $(LDFLAGS) $^ $(EMU_LIBS) -o $@

# Misaligned 128-bit loads, raw (UBSan must name the line) and through kern::load128
# (a launch error naming the kernel and address): test/emu/misaligned_access_test.sh.
$(BUILD)/test/emu/emu_misaligned_asan: $(BUILD)/asan/test/emu/misaligned_kernel.cu.o $(EMU_ASAN_LIB)
	@mkdir -p $(@D)
	$(CXX) $(EMU_SANITIZE) $(LDFLAGS) $^ $(EMU_LIBS) -o $@

# NCCL over MPI: run by test/emu/nccl_mpi_test.sh under mpirun -np 2.
$(BUILD)/test/emu/nccl_test: $(BUILD)/test/emu/nccl_test.o $(EMU_NCCL_LIB) $(EMU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(EMU_LIBS) $(EMU_MPI_LIBS) -lgtest -o $@

TESTS        += $(BUILD)/test/emu/emu_test $(BUILD)/test/emu/emu_asan_test
TEST_SCRIPTS += test/emu/nccl_mpi_test.sh test/emu/asan_oob_test.sh test/emu/nvcc_compile_test.sh \
                test/emu/misaligned_access_test.sh
TEST_PREREQS += $(BUILD)/test/emu/nccl_test $(BUILD)/test/emu/emu_oob_asan $(BUILD)/test/emu/emu_misaligned_asan

# ---- throughput benchmark -------------------------------------------------------------------------
$(BUILD)/dev/emu/bench_emu: $(BUILD)/dev/emu/bench_emu.o $(EMU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(EMU_LIBS) -o $@

bench-emu: $(BUILD)/dev/emu/bench_emu
	$(BUILD)/dev/emu/bench_emu

.PHONY: emu-nvcc bench-emu

# ---- profile build: memory transactions per kernel (emu/profile.h, docs/emulator.md) --------------
# A .cu source is compiled with clang at -O0 (every access as written: a float4 copy
# stays one 16-byte access) and AddressSanitizer's instrumentation in callback mode;
# $(EMU_PROFILE_LIB), the emulator built with GPT2_EMU_PROFILE=1, implements the
# callbacks (no ASan runtime is linked). Link with $(CXX) $(LDFLAGS) ... $(EMU_PROFILE_LIB) $(EMU_LIBS).
EMU_PROFILE_CXX   := $(firstword $(shell command -v clang++-14 clang++ 2>/dev/null))
EMU_PROFILE_FLAGS := -std=c++17 -O0 -g -DGPT2_EMU_PROFILE=1 -pthread -Wno-unused-command-line-argument \
                     -fsanitize=address -fno-sanitize-address-use-after-scope \
                     -mllvm -asan-instrumentation-with-call-threshold=0 -mllvm -asan-stack=0 \
                     -mllvm -asan-globals=0 -mllvm -asan-use-after-return=never \
                     -mllvm -asan-opt-globals=0
EMU_PROFILE_LIB   := $(BUILD)/profile/libemu.a
EMU_PROFILE_OBJS  := $(EMU_SRCS:%.cpp=$(BUILD)/profile/%.o) $(BUILD)/profile/emu/profile.o

$(BUILD)/profile/emu/%.o: emu/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CUDA_INC) $(CXXFLAGS) -DGPT2_EMU_PROFILE=1 -c $< -o $@

$(EMU_PROFILE_LIB): $(EMU_PROFILE_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# Any .cu file in the profile build: build/profile/X.cu.o
$(BUILD)/profile/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(EMU_PROFILE_CXX) $(CPPFLAGS) $(EMU_KERNEL_INC) $(EMU_PROFILE_FLAGS) -x c++ -c $< -o $@

# Kernels with known counts (test/emu/profile/profile_patterns_test.sh asserts them).
$(BUILD)/test/emu/profile_patterns: $(BUILD)/profile/test/emu/profile/patterns.cu.o $(EMU_PROFILE_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(EMU_LIBS) -o $@

TEST_PREREQS += $(BUILD)/test/emu/profile_patterns
TEST_SCRIPTS += test/emu/profile/profile_patterns_test.sh
