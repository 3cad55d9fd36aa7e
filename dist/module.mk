# dist/: MPI bootstrap, communicator, ZeRO plan, preemption -> build/libdist.a
# Also builds the dist tests (test/dist/) and the Slurm harness test (test/slurm/).
#
# For programs using dist/ (train_gpt2cu): link  $(DIST_LDLIBS)  (the library and
# Open MPI). dist/ headers do not include <mpi.h>, so no extra include path is needed.

MPI_INCDIRS := $(shell mpicxx --showme:incdirs 2>/dev/null)
MPI_LIBDIRS := $(shell mpicxx --showme:libdirs 2>/dev/null)
MPI_CPPFLAGS := $(addprefix -I,$(MPI_INCDIRS)) -DOMPI_SKIP_MPICXX=1  # C API only
MPI_LDLIBS := $(addprefix -L,$(MPI_LIBDIRS)) -lmpi

DIST_SRCS := dist/context.cpp dist/comm.cpp dist/comm_mpi.cpp dist/zero_plan.cpp dist/preempt.cpp
DIST_OBJS := $(DIST_SRCS:%.cpp=$(BUILD)/%.o)
DIST_LIB := $(BUILD)/libdist.a
DIST_LDLIBS := $(DIST_LIB) $(MPI_LDLIBS)

$(BUILD)/dist/%.o: CPPFLAGS += $(MPI_CPPFLAGS)

$(DIST_LIB): $(DIST_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Launch check: every rank prints its layout after checking each collective.
DIST_SELFCHECK := $(BUILD)/dist/dist_selfcheck
$(DIST_SELFCHECK): $(BUILD)/dist/dist_selfcheck.o $(DIST_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(DIST_LDLIBS)

# The collectives of one training step per ZeRO stage, timed and counted.
DIST_BENCH := $(BUILD)/dist/dist_bench
$(DIST_BENCH): $(BUILD)/dist/dist_bench.o $(DIST_LIB)
	$(CXX) $(LDFLAGS) -o $@ $< $(DIST_LDLIBS)

# make bench-dist: step time and bytes per step, stages 0/1/2 at 1 and 2 ranks.
bench-dist: train_gpt2cu $(DIST_BENCH)
	@bash dist/bench_dist.sh
.PHONY: bench-dist

# ---- tests -------------------------------------------------------------------
# Pure logic (ZeRO plan, launch-mode detection, Slurm cross-check, signal flag).
DIST_UNIT_TEST := $(BUILD)/test/dist/dist_unit_test
DIST_UNIT_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard test/dist/unit_*.cpp))
$(DIST_UNIT_TEST): $(DIST_UNIT_OBJS) $(DIST_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(DIST_UNIT_OBJS) $(DIST_LDLIBS) -lgtest -lgtest_main

# Collectives: the suite CommTest.* runs under mpirun with 2 and 3 ranks
# (test/dist/comm_mpirun_test.sh); standalone, as `make test` runs it, the
# binary runs only the world-1 cases CommWorldOne.* (every collective is a
# copy there), so the suite is not counted again as copies.
DIST_COMM_TEST := $(BUILD)/test/dist/comm_test
$(DIST_COMM_TEST): $(BUILD)/test/dist/comm_test.o $(DIST_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(DIST_LDLIBS) -lgtest

TESTS += $(DIST_UNIT_TEST) $(DIST_COMM_TEST)
# zero_train_test.sh and the Slurm test's training part also need ./train_gpt2cu
# (a TEST_PREREQ of train/module.mk).
TEST_SCRIPTS += test/dist/comm_mpirun_test.sh test/dist/zero_train_test.sh test/slurm/slurm_smoke_test.sh
TEST_PREREQS += $(DIST_COMM_TEST) $(DIST_SELFCHECK)
