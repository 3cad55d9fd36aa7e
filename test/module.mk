# test/: things the test harness itself needs (the per-area tests live in the
# area's own module.mk).
#
# The runner's self-test: test/runner/run_tests_selftest.sh runs
# scripts/run_tests.sh on a planted-failure GoogleTest binary and on planted
# scripts and checks every count, name and timeout. The binary is a
# prerequisite only: in TESTS its planted failures (and hang) would be real.
RUNNER_FIXTURE := $(BUILD)/test/runner/runner_fixture
$(RUNNER_FIXTURE): $(BUILD)/test/runner/runner_fixture.o
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< -lgtest

TEST_PREREQS += $(RUNNER_FIXTURE)
TEST_SCRIPTS += test/runner/run_tests_selftest.sh test/runner/kernel_names_test.sh

# The build's nvcc search and CPU flags (Makefile).
TEST_SCRIPTS += test/build/build_config_test.sh

# Every path and trainer flag the docs name exists (the tree, ./train_gpt2cu --help).
TEST_SCRIPTS += test/docs/doc_refs_test.sh
