// Helpers shared by prepare_data's plain mode (prepare_data.cpp) and SFT mode (sft.cpp).
#ifndef GPT2_DATAPREP_PREP_COMMON_H
#define GPT2_DATAPREP_PREP_COMMON_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

// 1234567 -> "1,234,567"
std::string with_commas(uint64_t v);

// Creates every directory of `prefix` up to its last '/'.
void make_parent_dirs(const std::string& prefix);

// "PREFIX_train_000003.bin" for (prefix, "train", 3); "PREFIX_train.bin" with no_index.
std::string shard_output_path(const std::string& prefix, const std::string& split, uint64_t index, bool no_index);

// Removes what an earlier run into the same prefix left that this run did not write
// (`written`: every .bin and .mask path of this run): indexed shards PREFIX_{val,train}_NNNNNN.bin
// and their .mask sidecars, and the sidecar next to a .bin this run wrote without one (a
// plain run over an SFT prefix), which the DataLoader would otherwise pair with the new shard.
void remove_stale_outputs(const std::string& prefix, const std::vector<std::string>& written, bool verbose);

}  // namespace gpt2

#endif  // GPT2_DATAPREP_PREP_COMMON_H
