# train/: optimizer, schedules, checkpoints, logging, sampling, the loop
# -> build/libtrain.a, and the trainer binary ./train_gpt2cu.
TRAIN_SRCS := $(wildcard train/*.cpp)
TRAIN_LIB  := $(BUILD)/libtrain.a

$(TRAIN_LIB): $(TRAIN_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

# Everything the trainer links, in dependency order.
TRAINER_LIBS := $(TRAIN_LIB) $(MODEL_LIB) $(BACKEND_CPU_LIB) $(DATALOADER_LIB) $(TOKENIZER_LIB) $(DIST_LIB)
TRAINER_LDLIBS := $(BACKEND_CPU_LDLIBS) $(TOKENIZER_LDLIBS) $(MPI_LDLIBS)

train_gpt2cu: $(BUILD)/train_gpt2.cu.o $(TRAINER_LIBS)
	$(CXX) $(LDFLAGS) -o $@ $< $(TRAINER_LIBS) $(TRAINER_LDLIBS)

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
TEST_SCRIPTS += test/e2e/resume_test.sh test/e2e/trainer_cli_test.sh
TEST_PREREQS += train_gpt2cu

# ---- benchmark: `make bench` (dev/train/bench.sh: ours vs PyTorch, MFU) ------------
BENCH_TRAIN_STEP := $(BUILD)/dev/train/bench_train_step
$(BENCH_TRAIN_STEP): $(BUILD)/dev/train/bench_train_step.o $(TRAINER_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(TRAINER_LIBS) $(TRAINER_LDLIBS)

bench: $(BENCH_TRAIN_STEP) $(BUILD)/dev/train/fp32_peak
	@dev/train/bench.sh
.PHONY: bench
$(BUILD)/dev/train/fp32_peak: $(BUILD)/dev/train/fp32_peak.o
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $<
