# tokenizer/: GPT-2 byte-level BPE (build/libtokenizer.a), the ./gpt2_tokenizer CLI, the `vocab`
# target and the tokenizer tests (GoogleTest vs node references, CLI, libFuzzer on the vocab parsers).
TOKENIZER_LIB  := $(BUILD)/libtokenizer.a
TOKENIZER_LDLIBS := -lpcre2-8

# util/checked_io (also in libmodel.a): the tokenizer's file output, standalone.
$(TOKENIZER_LIB): $(BUILD)/tokenizer/tokenizer.o $(BUILD)/util/checked_io.o
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

gpt2_tokenizer: $(BUILD)/tokenizer/gpt2_tokenizer_main.o $(TOKENIZER_LIB)
	$(CXX) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LDLIBS)

BINS += gpt2_tokenizer

# Fetch + verify OpenAI's encoder.json / vocab.bpe into ${GPT2_VOCAB_DIR:-data/gpt2}.
vocab:
	@scripts/get_gpt2_vocab.sh

TEST_PREREQS += vocab
.PHONY: vocab

# --- tests ---
TOKENIZER_TEST := $(BUILD)/test/tokenizer/tokenizer_test
$(TOKENIZER_TEST): $(BUILD)/test/tokenizer/tokenizer_test.o $(TOKENIZER_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ -o $@ -lgtest -lgtest_main $(TOKENIZER_LDLIBS)

# Reference ids come from node + npm tiktoken / gpt-3-encoder at test time (nothing committed).
TOKENIZER_NODE_MODULES := $(BUILD)/node/node_modules
TOKENIZER_REFS := $(BUILD)/test/tokenizer/refs/.stamp
$(TOKENIZER_NODE_MODULES)/.stamp:
	@mkdir -p $(BUILD)/node
	npm install --no-audit --no-fund --silent --prefix $(BUILD)/node tiktoken@1.0.22 gpt-3-encoder@1.1.4
	@touch $@
$(TOKENIZER_REFS): test/tokenizer/make_refs.js test/tokenizer/stress.txt data/tinyshakespeare/input.txt \
                   $(TOKENIZER_NODE_MODULES)/.stamp
	node test/tokenizer/make_refs.js $(TOKENIZER_NODE_MODULES) $(@D) data/tinyshakespeare/input.txt \
	  test/tokenizer/stress.txt
	@touch $@
tokenizer-refs: $(TOKENIZER_REFS)

TESTS        += $(TOKENIZER_TEST)
TEST_PREREQS += tokenizer-refs
.PHONY: tokenizer-refs

TEST_SCRIPTS += test/tokenizer/cli_test.sh test/tokenizer/fuzz_vocab.sh

# --- benchmark (not a test): ours vs npm tiktoken (WASM), single thread and all threads ---
$(BUILD)/dev/tokenizer/bench_tokenizer: $(BUILD)/dev/tokenizer/bench_tokenizer.o $(TOKENIZER_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LDLIBS)
bench-tokenizer: $(BUILD)/dev/tokenizer/bench_tokenizer prepare_data data $(TOKENIZER_NODE_MODULES)/.stamp
	@dev/tokenizer/bench.sh
.PHONY: bench-tokenizer
