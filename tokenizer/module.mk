# tokenizer/: GPT-2 byte-level BPE (build/libtokenizer.a), the ./gpt2_tokenizer CLI, the `vocab`
# target and the tokenizer tests (GoogleTest vs node references, CLI, libFuzzer on the vocab parsers).
TOKENIZER_LIB  := $(BUILD)/libtokenizer.a
TOKENIZER_LDLIBS := -lpcre2-8

$(TOKENIZER_LIB): $(BUILD)/tokenizer/tokenizer.o
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

gpt2_tokenizer: $(BUILD)/tokenizer/gpt2_tokenizer_main.o $(TOKENIZER_LIB)
	$(CXX) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LDLIBS)

BINS += gpt2_tokenizer

# Fetch + verify OpenAI's encoder.json / vocab.bpe into ${GPT2_VOCAB_DIR:-data/gpt2}.
vocab:
	@scripts/get_gpt2_vocab.sh

TEST_PREREQS += vocab
.PHONY: vocab
