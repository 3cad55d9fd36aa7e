# distributed/: MPI bootstrap, communicator, ZeRO plan, preemption -> build/libdistributed.a
# Also builds the dist tests (test/distributed/) and the Slurm harness test (test/slurm/).
#
# For programs using distributed/ (train_gpt2cu): link  $(DISTRIBUTED_LDLIBS)  (the library and
# Open MPI). distributed/ headers do not include <mpi.h>, so no extra include path is needed.

MPI_INCDIRS := $(shell mpicxx --showme:incdirs 2>/dev/null)
MPI_LIBDIRS := $(shell mpicxx --showme:libdirs 2>/dev/null)
MPI_CPPFLAGS := $(addprefix -I,$(MPI_INCDIRS)) -DOMPI_SKIP_MPICXX=1  # C API only
MPI_LDLIBS := $(addprefix -L,$(MPI_LIBDIRS)) -lmpi

DISTRIBUTED_SRCS := distributed/context.cpp distributed/comm.cpp distributed/comm_mpi.cpp distributed/zero_plan.cpp distributed/preempt.cpp distributed/watchdog.cpp \
                    distributed/env_launch.cpp distributed/rendezvous.cpp distributed/rendezvous_file.cpp
DISTRIBUTED_OBJS := $(DISTRIBUTED_SRCS:%.cpp=$(BUILD)/%.o)
DISTRIBUTED_LIB := $(BUILD)/libdistributed.a
DISTRIBUTED_LDLIBS := $(DISTRIBUTED_LIB) $(MPI_LDLIBS)

$(BUILD)/distributed/%.o: CPPFLAGS += $(MPI_CPPFLAGS)

$(DISTRIBUTED_LIB): $(DISTRIBUTED_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# The NCCL communicator (distributed/comm_nccl.cpp) -> build/libdistributed_nccl.a, built only
# where the CUDA toolkit's headers (with nccl.h) are. One object for both links:
#   train_gpt2cu (real GPU):     $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LDLIBS) ... -lnccl (+ cudart)
#   train_gpt2cu_emu (emulator): $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LDLIBS) ...
#                                $(EMU_NCCL_LIB) $(EMU_LIB) $(EMU_LIBS) $(EMU_MPI_LIBS)
# DISTRIBUTED_NCCL_LIB is empty without the headers. The include path is spelled out:
# $(EMU_CUDA_INC) is defined later (emu/module.mk) and a target-specific `+=` onto the
# simply-expanded CPPFLAGS expands its value here, at parse time.
# NCCL is often not part of a cluster's CUDA module: its header is looked for in
# $NCCL_HOME/include (`module load nccl`), the CUDA toolkit, then /usr/include.
NCCL_HOME ?=
NCCL_INC_DIR := $(patsubst %/nccl.h,%,$(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) \
                  $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)))
DISTRIBUTED_NCCL_LIB :=
ifneq ($(NCCL_INC_DIR),)
DISTRIBUTED_NCCL_LIB := $(BUILD)/libdistributed_nccl.a
$(BUILD)/distributed/comm_nccl.o: CPPFLAGS += -isystem $(NCCL_INC_DIR) -isystem $(CUDA_HOME)/include
$(DISTRIBUTED_NCCL_LIB): $(BUILD)/distributed/comm_nccl.o
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^
endif

# Launch check: every rank prints its layout after checking each collective.
DISTRIBUTED_SELFCHECK := $(BUILD)/distributed/dist_selfcheck
$(DISTRIBUTED_SELFCHECK): $(BUILD)/distributed/dist_selfcheck.o $(DISTRIBUTED_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(DISTRIBUTED_LDLIBS)

# The collectives of one training step per ZeRO stage, timed and counted.
DISTRIBUTED_BENCH := $(BUILD)/distributed/dist_bench
$(DISTRIBUTED_BENCH): $(BUILD)/distributed/dist_bench.o $(DISTRIBUTED_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(DISTRIBUTED_LDLIBS)

# The same replay against the NCCL communicator on device buffers (--comm nccl), one
# object (-DGPT2_DIST_BENCH_NCCL) linked twice, like comm_nccl.o: dist_bench_emu with the
# emulator's CUDA and NCCL over MPI (libraries spelled out: emu/module.mk comes later),
# dist_bench_cuda with cudart and -lnccl where nvcc is (NCCL_LDLIBS: train/module.mk).
DISTRIBUTED_BENCH_GPU :=
ifneq ($(DISTRIBUTED_NCCL_LIB),)
DISTRIBUTED_BENCH_NCCL_OBJ := $(BUILD)/distributed/dist_bench_nccl.o
$(DISTRIBUTED_BENCH_NCCL_OBJ): CPPFLAGS += -isystem $(CUDA_HOME)/include -DGPT2_DIST_BENCH_NCCL
$(DISTRIBUTED_BENCH_NCCL_OBJ): distributed/dist_bench.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@
DISTRIBUTED_BENCH_EMU := $(BUILD)/distributed/dist_bench_emu
$(DISTRIBUTED_BENCH_EMU): $(DISTRIBUTED_BENCH_NCCL_OBJ) $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LIB) \
                          $(BUILD)/libemu_nccl.a $(BUILD)/libemu.a
	$(CXX) $(LDFLAGS) -o $@ $< $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LDLIBS) \
	  $(EMU_NCCL_LIB) $(EMU_LIB) $(EMU_LIBS) $(EMU_MPI_LIBS)
ifneq ($(wildcard $(NVCC)),)
DISTRIBUTED_BENCH_GPU := $(BUILD)/distributed/dist_bench_cuda
$(DISTRIBUTED_BENCH_GPU): $(DISTRIBUTED_BENCH_NCCL_OBJ) $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LDLIBS) $(CUDA_LDLIBS) $(NCCL_LDLIBS)
endif
endif

# make bench-dist: bytes per step per rank and per collective, ZeRO 0/1/2 at 1 and 2
# ranks, on the CPU backend and on the emulated CUDA backend (NCCL emulated over MPI);
# with GPUs also step time, scaling and busbw at 1..N GPUs (distributed/bench_dist.sh).
bench-dist: train_gpt2cu $(DISTRIBUTED_BENCH) $(if $(DISTRIBUTED_NCCL_LIB),$(BUILD)/train_gpt2cu_emu) \
            $(DISTRIBUTED_BENCH_EMU) $(DISTRIBUTED_BENCH_GPU)
	@bash distributed/bench_dist.sh
.PHONY: bench-dist

# make bench-zero3: step time of ZeRO-3 against ZeRO-2, 2 CPU ranks, runs interleaved
# (distributed/bench_zero3.sh; about 2.5 minutes on 2 cores).
bench-zero3: train_gpt2cu
	@bash distributed/bench_zero3.sh
.PHONY: bench-zero3

# ---- tests -------------------------------------------------------------------
# Pure logic (ZeRO plan, launch-mode detection, Slurm cross-check, signal flag).
DISTRIBUTED_UNIT_TEST := $(BUILD)/test/distributed/dist_unit_test
DISTRIBUTED_UNIT_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard test/distributed/unit_*.cpp))
$(DISTRIBUTED_UNIT_TEST): $(DISTRIBUTED_UNIT_OBJS) $(DISTRIBUTED_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(DISTRIBUTED_UNIT_OBJS) $(DISTRIBUTED_LDLIBS) -lgtest -lgtest_main

# Collectives: the suite CommTest.* runs under mpirun with 2 and 3 ranks
# (test/distributed/comm_mpirun_test.sh); standalone, as `make test` runs it, the
# binary runs only the world-1 cases CommWorldOne.* (every collective is a
# copy there), so the suite is not counted again as copies.
DISTRIBUTED_COMM_TEST := $(BUILD)/test/distributed/comm_test
$(DISTRIBUTED_COMM_TEST): $(BUILD)/test/distributed/comm_test.o $(DISTRIBUTED_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(DISTRIBUTED_LDLIBS) -lgtest

TESTS += $(DISTRIBUTED_UNIT_TEST) $(DISTRIBUTED_COMM_TEST)

# The same suite against the NCCL communicator on device buffers, executed by the
# emulated NCCL (one emulated device per rank), plus its own cases
# (test/distributed/comm_nccl_test.cpp: bf16, traffic equal to MPI's, NCCL errors).
# comm_test.cpp is compiled a second time with GPT2_COMM_TEST_NCCL. Prerequisites
# expand at parse time, before emu/module.mk defines EMU_*_LIB: the libraries are
# spelled out there, the recipe uses the variables.
ifneq ($(DISTRIBUTED_NCCL_LIB),)
DISTRIBUTED_COMM_NCCL_TEST := $(BUILD)/test/distributed/comm_nccl_test
DISTRIBUTED_COMM_NCCL_OBJS := $(BUILD)/test/distributed/comm_test_nccl_build.o \
                              $(BUILD)/test/distributed/comm_nccl_test.o \
                              $(BUILD)/test/distributed/comm_async_test.o
$(DISTRIBUTED_COMM_NCCL_OBJS): CPPFLAGS += -isystem $(CUDA_HOME)/include -DGPT2_COMM_TEST_NCCL
$(BUILD)/test/distributed/comm_test_nccl_build.o: test/distributed/comm_test.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@
$(DISTRIBUTED_COMM_NCCL_TEST): $(DISTRIBUTED_COMM_NCCL_OBJS) $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LIB) \
                               $(BUILD)/libemu_nccl.a $(BUILD)/libemu.a
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(DISTRIBUTED_COMM_NCCL_OBJS) $(DISTRIBUTED_NCCL_LIB) $(DISTRIBUTED_LDLIBS) \
	  $(EMU_NCCL_LIB) $(EMU_LIB) $(EMU_LIBS) $(EMU_MPI_LIBS) -lgtest
TESTS += $(DISTRIBUTED_COMM_NCCL_TEST)
TEST_PREREQS += $(DISTRIBUTED_COMM_NCCL_TEST)
# The communicator's own stream under the emulator's deferred stream mode: 2-rank
# training reproduces 1 rank, and with one of its two event waits dropped
# (GPT2_TEST_DROP_COMM_WAIT) it must not. Runs build/train_gpt2cu_emu (a
# TEST_PREREQ of train/module.mk).
TEST_SCRIPTS += test/distributed/comm_stream_test.sh
# Communication overlapped with the backward (ZeRO-2 double-buffered unit
# exchange, stage 0/1 buckets) under the deferred stream mode: 2 ranks reproduce
# 1 rank, and without the buffer-reuse wait (GPT2_TEST_DROP_REUSE_WAIT) they must not.
TEST_SCRIPTS += test/distributed/comm_overlap_test.sh
# A dead peer ends the job even when ncclCommAbort blocks forever (the emulator's
# GPT2_EMU_NCCL_ABORT_BLOCKS / GPT2_EMU_NCCL_FREEZE_RANK): mpirun -np 2 of
# build/train_gpt2cu_emu exits within --comm-timeout + the stated slack.
TEST_SCRIPTS += test/distributed/abort_deadline_test.sh
# Launches without MPI: torchrun's variables (a shell loop, torch.distributed.run)
# reproduce mpirun bitwise over the emulated NCCL's socket transport; rendezvous
# failures; a dead peer ends the job.
TEST_SCRIPTS += test/distributed/launch_nompi_test.sh
endif
# zero_train_test.sh, zero3_test.sh and the Slurm test's training part also need ./train_gpt2cu
# (a TEST_PREREQ of train/module.mk).
# comm_timeout_test.sh: faults of one rank (hang, exit) end the job (--comm-timeout); it also
# runs build/train_gpt2cu_emu where that is built (the NCCL path), else says SKIP for that part.
TEST_SCRIPTS += test/distributed/comm_mpirun_test.sh test/distributed/zero_train_test.sh test/slurm/slurm_smoke_test.sh \
                test/distributed/comm_timeout_test.sh
# ZeRO-3 on CPU ranks: bitwise against the other stages, memory, checkpoints across stages.
TEST_SCRIPTS += test/distributed/zero3_test.sh
TEST_PREREQS += $(DISTRIBUTED_COMM_TEST) $(DISTRIBUTED_SELFCHECK)

# The Slurm test also checks that the cluster's PMIx fences hold every rank (the barrier that
# ends MPI_Init): a PMIx client of its own, built where libpmix-dev's pkg-config file is.
PMIX_CFLAGS := $(shell pkg-config --cflags pmix 2>/dev/null)
PMIX_LDLIBS := $(shell pkg-config --libs pmix 2>/dev/null)
ifneq ($(PMIX_LDLIBS),)
PMIX_BARRIER_CHECK := $(BUILD)/test/slurm/pmix_barrier_check
$(BUILD)/test/slurm/pmix_barrier_check.o: CPPFLAGS += $(PMIX_CFLAGS)
$(PMIX_BARRIER_CHECK): $(BUILD)/test/slurm/pmix_barrier_check.o
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(PMIX_LDLIBS)
TEST_PREREQS += $(PMIX_BARRIER_CHECK)
endif
