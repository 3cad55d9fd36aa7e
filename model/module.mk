# model/ + model_io/ + util/: config, tensor table, forward/backward, llm.c model files,
# Hugging Face GPT-2 checkpoints, checked I/O, RNG -> build/libmodel.a
# (model_io/convert_main.cpp holds a main(): it is the converter program, not library code).
MODEL_SRCS := $(wildcard model/*.cpp) $(filter-out model_io/convert_main.cpp,$(wildcard model_io/*.cpp)) $(wildcard util/*.cpp)
MODEL_LIB  := $(BUILD)/libmodel.a

$(MODEL_LIB): $(MODEL_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# ./gpt2_convert: llm.c model file <-> Hugging Face directory. libmodel.a's
# gpt2.o references the backend interface, hence the CPU backend library.
gpt2_convert: $(BUILD)/model_io/convert_main.o $(MODEL_LIB) $(BACKEND_CPU_LIB)
	$(CXX) $(LDFLAGS) -o $@ $^ $(BACKEND_CPU_LDLIBS)
BINS += gpt2_convert

# ---- tests: HF import against PyTorch, converter round trips (test/e2e/hf_import_test.sh)
HF_LOGITS := $(BUILD)/test/e2e/hf_logits
$(HF_LOGITS): $(BUILD)/test/e2e/hf_logits.o $(MODEL_LIB) $(BACKEND_CPU_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $^ $(BACKEND_CPU_LDLIBS)
TEST_PREREQS += $(HF_LOGITS)
TEST_SCRIPTS += test/e2e/hf_import_test.sh
