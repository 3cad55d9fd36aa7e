# dev/: developer tools. Included after train/module.mk: its rules link $(TRAINER_LIBS).

# ---- `make profile-cpu`: where a CPU training step's time goes, op by op ----------------------
PROFILE_CPU_STEP := $(BUILD)/dev/cpu/profile_cpu_step
PROFILE_CPU_STEP_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,dev/cpu/profile_cpu_step.cpp dev/cpu/timing_backend.cpp \
                           dev/cpu/step_profile.cpp dev/cpu/memory_bandwidth.cpp)
$(PROFILE_CPU_STEP): $(PROFILE_CPU_STEP_OBJS) $(TRAINER_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(PROFILE_CPU_STEP_OBJS) $(TRAINER_LIBS) $(TRAINER_LDLIBS)

# GPT-2 124M at the README's d12 shape, then the quick start's model (scripts/quickstart.sh).
profile-cpu: $(PROFILE_CPU_STEP)
	$(PROFILE_CPU_STEP) --model d12 -B 4 -T 64
	$(PROFILE_CPU_STEP) --model d4 --config n_layer=4,n_head=4,n_embd=256,max_seq=128 -B 8 -T 128
.PHONY: profile-cpu

# Built by `make test`, and its table checked on a tiny model.
TEST_PREREQS += $(PROFILE_CPU_STEP)
TEST_SCRIPTS += test/dev/profile_cpu_step_test.sh
