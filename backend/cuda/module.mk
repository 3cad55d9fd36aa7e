# backend/cuda/: the CUDA backend (backend/cuda/*.cuh + backend/cuda/cuda_backend.cu), its tests
# (test/backend_cuda/) and benchmark (dev/cuda/). docs/kernels.md describes them.
#
#   build/libbackend_cuda_emu.a   the backend compiled by g++ with $(EMU_KERNEL_INC), so the
#                                 CUDA headers it names resolve to the emulator (-O2);
#                                 link with $(EMU_LIB) $(EMU_LIBS)
#   make kernels-nvcc             nvcc compile check for sm_80 + sm_90: the fat object's --resource-usage
#                                 report in build/backend/cuda/nvcc_resource_usage.txt
#   make bench-cuda               per-op CUDA vs CPU timing, built with nvcc (needs a GPU)

CUDA_BACKEND_SRC     := backend/cuda/cuda_backend.cu
CUDA_BACKEND_FAT_OBJ := $(BUILD)/nvcc/fat/backend/cuda/cuda_backend.o
CUDA_BACKEND_EMU_OBJ := $(BUILD)/backend/cuda/emu/cuda_backend.o
CUDA_BACKEND_EMU_LIB := $(BUILD)/libbackend_cuda_emu.a

# -O2: the emulated kernels run in tests; the fibers dominate anyway.
$(CUDA_BACKEND_EMU_OBJ): $(CUDA_BACKEND_SRC)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_KERNEL_INC) $(CXXSTD) -O2 -g $(WARN) -fopenmp -pthread -x c++ -c $< -o $@

# cuDNN's fused attention: host code over cuDNN's C API (backend/cuda/cudnn_attention.cpp),
# or its refusal without cuDNN's headers. The emulated builds call the emulator's cuDNN;
# the GPU builds load libcudnn.so.9 at run time (GPT2_CUDNN_DLOPEN), so a GPU machine
# without cuDNN still trains, on the flash kernels.
CUDNN_ATTENTION_OBJ     := $(BUILD)/backend/cuda/$(if $(CUDNN_INC_DIR),cudnn_attention.o,cudnn_attention_absent.o)
CUDNN_ATTENTION_GPU_OBJ := $(BUILD)/backend/cuda/$(if $(CUDNN_INC_DIR),gpu/cudnn_attention.o,cudnn_attention_absent.o)
$(BUILD)/backend/cuda/cudnn_attention.o $(BUILD)/asan/backend/cuda/cudnn_attention.o: \
  CPPFLAGS += -isystem $(CUDNN_INC_DIR) -isystem $(CUDA_HOME)/include
$(BUILD)/backend/cuda/gpu/cudnn_attention.o: backend/cuda/cudnn_attention.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) -isystem $(CUDNN_INC_DIR) -isystem $(CUDA_HOME)/include -DGPT2_CUDNN_DLOPEN=1 $(CXXFLAGS) -c $< -o $@

$(CUDA_BACKEND_EMU_LIB): $(CUDA_BACKEND_EMU_OBJ) $(CUDNN_ATTENTION_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# ---- tests (emulation; the ASan variant instruments the backend, the tests and the harness) ----
KCUDA_TEST_SRCS := $(sort $(wildcard test/backend_cuda/*.cpp))
KCUDA_HARNESS   := test/backend/harness.cpp test/backend/cases.cpp test/backend/cases_embedding.cpp \
                   test/backend/cases_fused.cpp test/backend/cases_dropout.cpp test/backend/cases_attention.cpp
KCUDA_TEST      := $(BUILD)/test/backend_cuda/backend_cuda_test
KCUDA_ASAN_TEST := $(BUILD)/test/backend_cuda/backend_cuda_asan_test

$(KCUDA_TEST): $(KCUDA_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(KCUDA_HARNESS:%.cpp=$(BUILD)/%.o) \
               $(CUDA_BACKEND_EMU_LIB) $(BUILD)/libmodel.a $(BACKEND_CPU_LIB) $(EMU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(EMU_LIBS) $(BACKEND_CPU_LDLIBS) -lgtest -lgtest_main -o $@

$(KCUDA_ASAN_TEST): $(KCUDA_TEST_SRCS:%.cpp=$(BUILD)/asan/%.o) $(KCUDA_HARNESS:%.cpp=$(BUILD)/asan/%.o) \
                    $(BUILD)/asan/backend/cuda/cuda_backend.cu.o $(CUDNN_ATTENTION_OBJ:$(BUILD)/%=$(BUILD)/asan/%) \
                    $(BUILD)/libmodel.a $(BACKEND_CPU_LIB) $(EMU_ASAN_LIB)
	@mkdir -p $(@D)
	$(CXX) $(EMU_SANITIZE) $(LDFLAGS) $^ $(EMU_LIBS) $(BACKEND_CPU_LDLIBS) -lgtest -lgtest_main -o $@

# cuda_gemm_test.cpp calls cuBLAS, cuBLASLt and the runtime itself, cudnn_graph_api_test.cpp
# cuDNN's graph API: the toolkit's headers.
$(BUILD)/test/backend_cuda/cuda_gemm_test.o $(BUILD)/asan/test/backend_cuda/cuda_gemm_test.o \
$(BUILD)/test/backend_cuda/cudnn_graph_api_test.o $(BUILD)/asan/test/backend_cuda/cudnn_graph_api_test.o: \
  CPPFLAGS += $(EMU_CUDA_INC) $(if $(CUDNN_INC_DIR),-isystem $(CUDNN_INC_DIR))

TESTS        += $(KCUDA_TEST) $(KCUDA_ASAN_TEST)
TEST_SCRIPTS += test/backend_cuda/random_order_test.sh test/backend_cuda/nvcc_compile_test.sh \
                test/backend_cuda/index_width_test.sh

# ---- nvcc compile check: one translation unit holds every kernel ---------------------------------
# The fat object below (sm_80 + sm_90, the trainer's) is compiled with --resource-usage once:
# its ptxas report lists every kernel per architecture, so no second nvcc pass is needed.
CUDA_BACKEND_RESOURCE_USAGE := $(BUILD)/backend/cuda/nvcc_resource_usage.txt

$(CUDA_BACKEND_RESOURCE_USAGE): $(CUDA_BACKEND_FAT_OBJ)
	@mkdir -p $(@D)
	@{ echo "== $<"; grep -E "Compiling entry|Used [0-9]+ registers|stack frame" $(<:.o=.resource.txt) \
	  | sed -E "s/.*Compiling entry function '([^']+)' for '([^']+)'.*/\2 \1/" | c++filt; } > $@
	@echo "resource usage -> $@"

kernels-nvcc: $(CUDA_BACKEND_RESOURCE_USAGE)

# ---- benchmark: the harness's GPT-2 d12 perf cases on the CPU and CUDA backends ------------------
# The emulated build only proves it links; timings mean something only from the nvcc build.
KCUDA_BENCH_EMU := $(BUILD)/dev/cuda/bench_cuda_ops_emu
KCUDA_BENCH_GPU := $(BUILD)/dev/cuda/bench_cuda_ops
$(KCUDA_BENCH_EMU): $(BUILD)/dev/cuda/bench_cuda_ops.o $(KCUDA_HARNESS:%.cpp=$(BUILD)/%.o) \
                    $(CUDA_BACKEND_EMU_LIB) $(BACKEND_CPU_LIB) $(EMU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(EMU_LIBS) $(BACKEND_CPU_LDLIBS) -o $@

# ---- real-GPU builds (nvcc; run only where a GPU is: `make bench-cuda`, scripts/gpu_check.sh) --------
# One fat object of the backend serves the trainer, the GPU op tests and the benchmark.
# CUDA_GENCODE picks the architectures: by default sm_80 + sm_90, plus the architecture of
# every GPU visible at build time (nvidia-smi), so a build on a GPU node also runs there.
CUDA_VISIBLE_ARCHS := $(sort $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null \
                        | tr -d . | grep -E '^[0-9]+$$'))
CUDA_GENCODE ?= $(foreach a,$(sort 80 90 $(CUDA_VISIBLE_ARCHS)),-gencode arch=compute_$(a),code=sm_$(a))
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -ldl
$(CUDA_BACKEND_FAT_OBJ): $(CUDA_BACKEND_SRC) $(wildcard backend/cuda/*.cuh backend/cuda/*.h backend/*.h)
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 -O3 --resource-usage -I. $(CUDA_GENCODE) -Xcompiler -fPIC -c $< -o $@ \
	  > $(@:.o=.resource.txt) 2>&1 || { cat $(@:.o=.resource.txt); exit 1; }

$(KCUDA_BENCH_GPU): $(BUILD)/dev/cuda/bench_cuda_ops.o $(KCUDA_HARNESS:%.cpp=$(BUILD)/%.o) \
                    $(CUDA_BACKEND_FAT_OBJ) $(CUDNN_ATTENTION_GPU_OBJ) $(BACKEND_CPU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(BACKEND_CPU_LDLIBS) $(CUDA_LDLIBS) -o $@

# The CUDA backend's op, bf16 and model tests on a real GPU: the same test sources as
# backend_cuda_test, linked with the nvcc backend; emu/control.h's run-order switch is
# a no-op there (test/backend_cuda/hw/run_order_hw.cpp), so "three run orders" become
# three runs whose bits must still agree. cudnn_graph_api_test.cpp calls cuDNN itself, which
# the GPU builds load at run time instead of linking: it tests the emulator's model only.
KCUDA_EMU_ONLY_SRCS := test/backend_cuda/cudnn_graph_api_test.cpp
KCUDA_GPU_TEST := $(BUILD)/gpu/backend_cuda_gpu_test
$(KCUDA_GPU_TEST): $(patsubst %.cpp,$(BUILD)/%.o,$(filter-out $(KCUDA_EMU_ONLY_SRCS),$(KCUDA_TEST_SRCS))) \
                   $(KCUDA_HARNESS:%.cpp=$(BUILD)/%.o) \
                   $(BUILD)/test/backend_cuda/hw/run_order_hw.o $(CUDA_BACKEND_FAT_OBJ) $(CUDNN_ATTENTION_GPU_OBJ) \
                   $(BUILD)/libmodel.a $(BACKEND_CPU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(BACKEND_CPU_LDLIBS) $(CUDA_LDLIBS) -lgtest -lgtest_main -o $@

gpu-binaries: $(KCUDA_GPU_TEST) $(KCUDA_BENCH_GPU)
print-cuda-gencode:
	@echo '$(CUDA_GENCODE)'

bench-cuda: $(KCUDA_BENCH_GPU)
	$(KCUDA_BENCH_GPU)

TEST_PREREQS += $(KCUDA_BENCH_EMU)

.PHONY: kernels-nvcc bench-cuda gpu-binaries print-cuda-gencode

# ---- profile: the d12 step's ops in the emulator's profile build (emu/profile.h) ----------------
PROFILE_CUDA_DRIVER := $(BUILD)/dev/profile/profile_cuda_ops
$(BUILD)/dev/profile/profile_cuda_ops.o: CPPFLAGS += -DGPT2_EMU_PROFILE=1
$(PROFILE_CUDA_DRIVER): $(BUILD)/dev/profile/profile_cuda_ops.o $(KCUDA_HARNESS:%.cpp=$(BUILD)/%.o) \
                        $(BUILD)/profile/backend/cuda/cuda_backend.cu.o $(CUDNN_ATTENTION_OBJ) $(BACKEND_CPU_LIB) \
                        $(EMU_PROFILE_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ $(EMU_LIBS) $(BACKEND_CPU_LDLIBS) -o $@

# build/profile/kernels.jsonl and the table (docs/kernels.md, "Memory transactions per kernel").
profile-cuda: $(PROFILE_CUDA_DRIVER)
	dev/profile/profile_cuda.sh $(PROFILE_CUDA_DRIVER) $(BUILD)/profile

# Built by make test (it must keep linking); run by make profile-cuda only (minutes).
TEST_PREREQS += $(PROFILE_CUDA_DRIVER)

.PHONY: profile-cuda
