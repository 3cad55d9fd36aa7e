# model/ + util/: config, tensor table, forward/backward, llm.c model files,
# checked I/O, RNG -> build/libmodel.a
MODEL_SRCS := $(wildcard model/*.cpp) $(wildcard util/*.cpp)
MODEL_LIB  := $(BUILD)/libmodel.a

$(MODEL_LIB): $(MODEL_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^
