# dataprep/: ./prepare_data, the general corpus -> GPT-2 token shards tool (text or JSONL input,
# multithreaded, bounded memory), plus the `data` target (tinyshakespeare shards for the tests).
# (literal library paths: this fragment is included before tokenizer/module.mk)
# --sft mode: dataprep/sft.{h,cpp} (docs/sft.md); shared helpers: dataprep/prep_common.{h,cpp}.
DATAPREP_OBJS := $(BUILD)/dataprep/sft.o $(BUILD)/dataprep/prep_common.o
prepare_data: $(BUILD)/dataprep/prepare_data.o $(DATAPREP_OBJS) $(BUILD)/libtokenizer.a $(BUILD)/libdataloader.a
	$(CXX) $(LDFLAGS) $^ -o $@ -lpcre2-8

BINS += prepare_data

# data/tinyshakespeare/{input.txt,tiny_shakespeare_val.bin,tiny_shakespeare_train.bin};
# text from $TINYSHAKESPEARE_TXT, an existing input.txt, or the char-rnn URL.
data: prepare_data vocab
	@scripts/prepare_tinyshakespeare.sh

TEST_PREREQS += data
.PHONY: data

# The text alone (the tokenizer's reference generation needs it before the shards exist).
data/tinyshakespeare/input.txt:
	@scripts/prepare_tinyshakespeare.sh --text-only

TEST_SCRIPTS += test/dataprep/prepare_data_test.sh
TEST_SCRIPTS += test/e2e/corpus_recipe_test.sh

# SFT: exact tokens and masks of both JSONL forms, packing invariants, the DataLoader over the
# packed shards (GoogleTest, needs the vocabulary); the CLI side in sft_cli_test.sh.
SFT_TEST := $(BUILD)/test/dataprep/sft_test
$(SFT_TEST): $(BUILD)/test/dataprep/sft_test.o $(DATAPREP_OBJS) $(BUILD)/libtokenizer.a $(BUILD)/libdataloader.a
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ -o $@ -lgtest -lgtest_main -lpcre2-8

TESTS        += $(SFT_TEST)
TEST_SCRIPTS += test/dataprep/sft_cli_test.sh
