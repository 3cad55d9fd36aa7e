# train/ + metrics/: optimizer, schedules, checkpoints, sampling, the loop, and
# what a run measures and logs -> build/libtrain.a, and the trainer binary
# ./train_gpt2cu. train/device_link_cuda.cpp goes only into the CUDA-capable
# trainers (below).
TRAIN_SRCS := $(filter-out train/device_link_cuda.cpp,$(wildcard train/*.cpp)) $(wildcard metrics/*.cpp)
TRAIN_LIB  := $(BUILD)/libtrain.a

# Every archive rule starts from an empty archive: `ar rcs` alone keeps the
# members of deleted sources, which then clash with their successors.
$(TRAIN_LIB): $(TRAIN_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# Everything the trainer links, in dependency order.
TRAINER_LIBS := $(TRAIN_LIB) $(MODEL_LIB) $(BACKEND_CPU_LIB) $(DATALOADER_LIB) $(TOKENIZER_LIB) $(DISTRIBUTED_LIB)
TRAINER_LDLIBS := $(BACKEND_CPU_LDLIBS) $(TOKENIZER_LDLIBS) $(MPI_LDLIBS)

# With nvcc present, train_gpt2cu also carries the CUDA backend (backend/cuda/, fat
# binary for sm_80 + sm_90) and picks it at run time when a GPU is visible
# (--device auto); without nvcc it is the CPU trainer. What differs is linked, not
# compiled (train/device_link.h): the CUDA-capable variants take
# train/device_link_cuda.o and libtrain_parts.a (libtrain.a without
# device_link_none.o), the others libtrain.a.
TRAINER_CUDA_OBJ := $(BUILD)/train/device_link_cuda.o
TRAIN_LIB_NO_LOOP := $(BUILD)/libtrain_parts.a
$(TRAIN_LIB_NO_LOOP): $(patsubst %.cpp,$(BUILD)/%.o,$(filter-out train/device_link_none.cpp,$(TRAIN_SRCS)))
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^
# The CUDA-capable trainers move device buffers between ranks with the NCCL
# communicator (distributed/comm_nccl.h): its library goes before libdistributed.a
# (it implements that library's Communicator), and the program links NCCL itself:
# the real -lnccl (nvcc builds) or the emulator's NCCL over MPI (train_gpt2cu_emu).
# Without nccl.h, distributed/comm_nccl_absent.o stands in: its
# make_nccl_communicator refuses multi-GPU runs, saying why.
TRAINER_NCCL := $(if $(DISTRIBUTED_NCCL_LIB),$(DISTRIBUTED_NCCL_LIB),$(BUILD)/distributed/comm_nccl_absent.o)
TRAINER_CUDA_LIBS := $(TRAINER_CUDA_OBJ) $(TRAIN_LIB_NO_LOOP) \
                     $(filter-out $(TRAIN_LIB) $(DISTRIBUTED_LIB),$(TRAINER_LIBS)) \
                     $(TRAINER_NCCL) $(DISTRIBUTED_LIB)
# -lnccl from $NCCL_HOME/lib, CUDA_LDLIBS' -L$(CUDA_HOME)/lib64 (the toolkit's NCCL) or the
# system paths; without nccl.h the trainer is built without NCCL and refuses multi-GPU runs.
NCCL_LDLIBS := $(if $(DISTRIBUTED_NCCL_LIB),$(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Wl$(comma)-rpath$(comma)$(NCCL_HOME)/lib) -lnccl)

HAVE_NVCC := $(wildcard $(NVCC))
ifneq ($(HAVE_NVCC),)
TRAINER_CUDA_LINK = $(CXX) $(LDFLAGS) -o $@ $< $(CUDA_BACKEND_FAT_OBJ) $(CUDNN_ATTENTION_GPU_OBJ) $(TRAINER_CUDA_LIBS) $(TRAINER_LDLIBS) \
                    $(CUDA_LDLIBS) $(NCCL_LDLIBS)
train_gpt2cu: $(BUILD)/train_gpt2.cu.o $(CUDA_BACKEND_FAT_OBJ) $(CUDNN_ATTENTION_GPU_OBJ) $(TRAINER_CUDA_LIBS)
	$(TRAINER_CUDA_LINK)
# The same program under $(BUILD) (the GPU kit builds it with portable flags there).
$(BUILD)/gpu/train_gpt2cu: $(BUILD)/train_gpt2.cu.o $(CUDA_BACKEND_FAT_OBJ) $(CUDNN_ATTENTION_GPU_OBJ) $(TRAINER_CUDA_LIBS)
	@mkdir -p $(@D)
	$(TRAINER_CUDA_LINK)
gpu-binaries: $(BUILD)/gpu/train_gpt2cu
else
train_gpt2cu: $(BUILD)/train_gpt2.cu.o $(TRAINER_LIBS)
	$(CXX) $(LDFLAGS) -o $@ $< $(TRAINER_LIBS) $(TRAINER_LDLIBS)
gpu-binaries:
	@echo "gpu-binaries: nvcc not found at $(NVCC)"; exit 1
endif

# The same trainer with the CUDA backend running on the emulator: executes the
# CUDA backend through the real training loop in tests (--device cuda).
TRAINER_EMU := $(BUILD)/train_gpt2cu_emu
$(TRAINER_EMU): $(BUILD)/train_gpt2.cu.o $(CUDA_BACKEND_EMU_LIB) $(TRAINER_CUDA_LIBS) $(EMU_NCCL_LIB) $(EMU_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(TRAINER_CUDA_LIBS) $(CUDA_BACKEND_EMU_LIB) $(BACKEND_CPU_LIB) $(EMU_NCCL_LIB) \
	  $(EMU_LIB) $(TRAINER_LDLIBS) $(EMU_LIBS) $(EMU_MPI_LIBS)

BINS += train_gpt2cu

# ---- tests ----------------------------------------------------------------------
TRAIN_UNIT_TEST := $(BUILD)/test/train/train_unit_test
TRAIN_UNIT_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard test/train/*.cpp) $(wildcard test/model/*.cpp))
$(TRAIN_UNIT_TEST): $(TRAIN_UNIT_OBJS) $(TRAINER_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(TRAIN_UNIT_OBJS) $(TRAINER_LIBS) $(TRAINER_LDLIBS) -lgtest -lgtest_main

TORCH_COMPARE_TEST := $(BUILD)/test/e2e/torch_compare_test
$(TORCH_COMPARE_TEST): $(BUILD)/test/e2e/torch_compare_test.o $(TRAINER_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(TRAINER_LIBS) $(TRAINER_LDLIBS) -lgtest -lgtest_main

TESTS += $(TRAIN_UNIT_TEST) $(TORCH_COMPARE_TEST)
TEST_SCRIPTS += test/e2e/resume_test.sh test/e2e/trainer_cli_test.sh test/e2e/cuda_emu_train_test.sh \
                test/e2e/device_fault_test.sh test/e2e/checkpoint_integrity_test.sh \
                test/e2e/resume_semantics_test.sh test/e2e/eval_generate_test.sh test/e2e/sft_train_test.sh \
                test/e2e/output_safety_test.sh test/e2e/stop_signal_test.sh test/e2e/eval_checkpoints_test.sh \
                test/e2e/dropout_train_test.sh test/e2e/pretraining_test.sh \
                test/e2e/spike_guard_test.sh test/e2e/hellaswag_test.sh test/e2e/attention_choice_test.sh \
                test/e2e/inputs_sacred_test.sh
TEST_PREREQS += train_gpt2cu $(TRAINER_EMU)
# Multi-rank training on the CUDA backend through the NCCL communicator (emulated:
# one device per rank), ZeRO 0/1/2, fp32 and bf16, against one rank and the CPU
# backend; runs $(TRAINER_EMU) (--device cuda and --device cpu) under mpirun.
TEST_SCRIPTS += test/distributed/zero_cuda_emu_test.sh test/distributed/dry_run_test.sh \
                test/distributed/resume_across_test.sh
# dev/roofline/roofline.py's memory table against what the emulated CUDA trainer allocates.
TEST_SCRIPTS += dev/roofline/memory_test.sh
TEST_SCRIPTS += test/docs/roofline_doc_test.sh

# ---- benchmark: `make bench` (dev/train/bench.sh: ours vs PyTorch, MFU) ------------
BENCH_TRAIN_STEP := $(BUILD)/dev/train/bench_train_step
$(BENCH_TRAIN_STEP): $(BUILD)/dev/train/bench_train_step.o $(TRAINER_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(TRAINER_LIBS) $(TRAINER_LDLIBS)

bench: $(BENCH_TRAIN_STEP) $(BUILD)/dev/train/fp32_peak
	@dev/train/bench.sh
.PHONY: bench
# Built by `make test` too, so a change to the seam cannot leave `make bench` broken unnoticed.
TEST_PREREQS += $(BENCH_TRAIN_STEP) $(BUILD)/dev/train/fp32_peak
$(BUILD)/dev/train/fp32_peak: $(BUILD)/dev/train/fp32_peak.o $(TRAIN_LIB) $(BACKEND_CPU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(TRAIN_LIB) $(BACKEND_CPU_LIB) $(BACKEND_CPU_LDLIBS)
