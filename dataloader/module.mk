# dataloader/: token shard format (shard.h) and the distributed, shuffling,
# resumable batch loader (dataloader.h). Builds build/libdataloader.a.
DATALOADER_SRCS := dataloader/file_io.cpp dataloader/shard.cpp dataloader/dataloader.cpp dataloader/loss_mask.cpp
DATALOADER_LIB  := $(BUILD)/libdataloader.a

$(DATALOADER_LIB): $(DATALOADER_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

DATALOADER_TEST := $(BUILD)/test/dataloader/dataloader_test
$(DATALOADER_TEST): $(BUILD)/test/dataloader/shard_test.o $(BUILD)/test/dataloader/dataloader_test.o \
                  $(BUILD)/test/dataloader/loss_mask_test.o $(DATALOADER_LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $^ -o $@ -lgtest -lgtest_main

TESTS        += $(DATALOADER_TEST)
TEST_SCRIPTS += test/dataloader/fuzz_shard.sh
