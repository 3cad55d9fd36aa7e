# backend/: the CPU backend (build/libbackend_cpu.a: fp32, OpenMP, OpenBLAS), its
# op test harness (test/backend/) and op benchmarks (dev/cpu/, `make bench-ops`).
# Link a program against it with: $(BACKEND_CPU_LIB) $(BACKEND_CPU_LDLIBS)
BACKEND_CPU_LIB    := $(BUILD)/libbackend_cpu.a
BACKEND_CPU_LDLIBS := -lopenblas
# fp32 GEMMs run on oneDNN's sgemm where its headers are found (Debian: libdnnl-dev;
# ONEDNN_HOME for another install): faster than OpenBLAS on the step's shapes
# (make bench-blas, docs/backend-cpu.md). Without it OpenBLAS runs them. fp64 (the
# op tests' gradient checks) stays on OpenBLAS either way.
ONEDNN_HOME ?=
ONEDNN_INC_DIR := $(patsubst %/oneapi/dnnl/dnnl.h,%,$(firstword $(wildcard $(if $(ONEDNN_HOME),$(ONEDNN_HOME)/include/oneapi/dnnl/dnnl.h) \
                    /usr/include/oneapi/dnnl/dnnl.h /usr/local/include/oneapi/dnnl/dnnl.h)))
ifneq ($(ONEDNN_INC_DIR),)
BACKEND_CPU_LDLIBS := $(if $(ONEDNN_HOME),-L$(ONEDNN_HOME)/lib -Wl$(comma)-rpath$(comma)$(ONEDNN_HOME)/lib) -ldnnl -lopenblas
$(BUILD)/backend/cpu/blas.o: CPPFLAGS += -DGPT2_WITH_ONEDNN=1 $(if $(filter-out /usr/include,$(ONEDNN_INC_DIR)),-isystem $(ONEDNN_INC_DIR))
$(BUILD)/asan/backend/cpu/blas.o: CPPFLAGS += -DGPT2_WITH_ONEDNN=1 $(if $(filter-out /usr/include,$(ONEDNN_INC_DIR)),-isystem $(ONEDNN_INC_DIR))
endif
BACKEND_CPU_SRCS   := $(sort $(wildcard backend/cpu/*.cpp)) backend/op_checks.cpp backend/sizing_backend.cpp
BACKEND_CPU_OBJS   := $(BACKEND_CPU_SRCS:%.cpp=$(BUILD)/%.o)

# The op loops call sqrt; without errno semantics GCC can vectorise it. The
# loops that call vexp (vmath.h: softmax, GELU) hold float compares and selects,
# which GCC will not if-convert under the default -ftrapping-math (a compare may
# raise an FP exception flag): those loops would stay scalar. Nothing here reads
# the FP flags. Elementwise results are the same bits scalar or vector; a sum
# marked `omp simd reduction` (attention's softmax row) adds in vector lanes,
# an order the pragma allows. GCC's default for Skylake-X is 256-bit vectors;
# OpenBLAS's SkylakeX kernels already run the cores at the AVX-512 clock, so the
# elementwise loops may as well use 512-bit ones (no effect on CPUs without
# AVX-512).
BACKEND_CPU_FLAGS := -fno-math-errno -fno-trapping-math
ifneq ($(findstring x86_64,$(shell $(CXX) -dumpmachine)),)
BACKEND_CPU_FLAGS += -mprefer-vector-width=512
endif
$(BUILD)/backend/cpu/%.o: CXXFLAGS += $(BACKEND_CPU_FLAGS)
# AdamW rounds every product and sum on its own, as the CUDA kernel does
# (backend/cuda/adamw.cuh): an optimizer offloaded to the CPU then updates the
# same bits. (sum_squares' products are exact in fp64: contraction changes nothing there.)
$(BUILD)/backend/cpu/optimizer.o: CXXFLAGS += -ffp-contract=off

$(BACKEND_CPU_LIB): $(BACKEND_CPU_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# Op test harness: eval (vs naive fp64 references), grad (finite differences on
# the fp64 instantiation), guard bytes; --perf for the benchmark mode.
BACKEND_OPS_TEST := $(BUILD)/test/backend/backend_ops_test
BACKEND_OPS_TEST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(sort $(wildcard test/backend/*.cpp)))

$(BACKEND_OPS_TEST): $(BACKEND_OPS_TEST_OBJS) $(BACKEND_CPU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ -o $@ -lgtest $(BACKEND_CPU_LDLIBS)

TESTS += $(BACKEND_OPS_TEST)
# Every call of an op names its arguments (no positional brace lists).
TEST_SCRIPTS += test/backend/named_args_test.sh

# GEMM threading comparison (OpenBLAS pool vs OpenMP split) at d12 shapes.
BENCH_GEMM := $(BUILD)/dev/cpu/bench_gemm
$(BENCH_GEMM): $(BUILD)/dev/cpu/bench_gemm.o $(BACKEND_CPU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ -o $@ $(BACKEND_CPU_LDLIBS)

bench-ops: $(BACKEND_OPS_TEST) $(BENCH_GEMM)
	$(BENCH_GEMM)
	$(BACKEND_OPS_TEST) --perf

# OpenBLAS against BLIS and oneDNN (loaded if installed) on the step's GEMMs.
BENCH_BLAS_LIBS := $(BUILD)/dev/cpu/bench_blas_libs
$(BENCH_BLAS_LIBS): $(BUILD)/dev/cpu/bench_blas_libs.o $(BACKEND_CPU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ -o $@ $(BACKEND_CPU_LDLIBS) -ldl

bench-blas: $(BENCH_BLAS_LIBS)
	$(BENCH_BLAS_LIBS)

.PHONY: bench-ops bench-blas
