# distributed/: MPI bootstrap, communicator, ZeRO plan, preemption -> build/libdistributed.a
# Also builds the dist tests (test/distributed/) and the Slurm harness test (test/slurm/).
#
# For programs using distributed/ (train_gpt2cu): link  $(DISTRIBUTED_LDLIBS)  (the library and
# Open MPI). distributed/ headers do not include <mpi.h>, so no extra include path is needed.

MPI_INCDIRS := $(shell mpicxx --showme:incdirs 2>/dev/null)
MPI_LIBDIRS := $(shell mpicxx --showme:libdirs 2>/dev/null)
MPI_CPPFLAGS := $(addprefix -I,$(MPI_INCDIRS)) -DOMPI_SKIP_MPICXX=1  # C API only
MPI_LDLIBS := $(addprefix -L,$(MPI_LIBDIRS)) -lmpi

DISTRIBUTED_SRCS := distributed/context.cpp distributed/comm.cpp distributed/comm_mpi.cpp distributed/zero_plan.cpp distributed/preempt.cpp
DISTRIBUTED_OBJS := $(DISTRIBUTED_SRCS:%.cpp=$(BUILD)/%.o)
DISTRIBUTED_LIB := $(BUILD)/libdistributed.a
DISTRIBUTED_LDLIBS := $(DISTRIBUTED_LIB) $(MPI_LDLIBS)

$(BUILD)/distributed/%.o: CPPFLAGS += $(MPI_CPPFLAGS)

$(DISTRIBUTED_LIB): $(DISTRIBUTED_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Launch check: every rank prints its layout after checking each collective.
DISTRIBUTED_SELFCHECK := $(BUILD)/distributed/dist_selfcheck
$(DISTRIBUTED_SELFCHECK): $(BUILD)/distributed/dist_selfcheck.o $(DISTRIBUTED_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(DISTRIBUTED_LDLIBS)

# The collectives of one training step per ZeRO stage, timed and counted.
DISTRIBUTED_BENCH := $(BUILD)/distributed/dist_bench
$(DISTRIBUTED_BENCH): $(BUILD)/distributed/dist_bench.o $(DISTRIBUTED_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(DISTRIBUTED_LDLIBS)

# make bench-dist: step time and bytes per step, stages 0/1/2 at 1 and 2 ranks.
bench-dist: train_gpt2cu $(DISTRIBUTED_BENCH)
	@bash distributed/bench_dist.sh
.PHONY: bench-dist

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
# zero_train_test.sh and the Slurm test's training part also need ./train_gpt2cu
# (a TEST_PREREQ of train/module.mk).
TEST_SCRIPTS += test/distributed/comm_mpirun_test.sh test/distributed/zero_train_test.sh test/slurm/slurm_smoke_test.sh
TEST_PREREQS += $(DISTRIBUTED_COMM_TEST) $(DISTRIBUTED_SELFCHECK)
