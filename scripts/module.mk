# scripts/: the GPU kit and the one-command GPU check (docs/gpu.md).
#
#   make gpu-kit     scripts/gpu_kit.sh: prebuilt CUDA binaries + their libraries + data
#                    -> gpu-kit/gpu-kit.tar.xz, carried to a lent GPU machine
#   scripts/gpu_check.sh OUT_DIR   on the GPU machine (--rehearsal: here, emulated)

gpu-kit:
	@scripts/gpu_kit.sh gpu-kit
.PHONY: gpu-kit

# The rehearsal of gpu_check.sh on the emulated builds, the kit's size and its
# self-containment (needs the emulated test binaries, the trainers and the data).
TEST_SCRIPTS += test/gpu/gpu_check_rehearsal_test.sh

# The Apptainer definition's build steps are the scripts CI and the quick start run (a clean
# build in a scratch copy; Apptainer itself is not installable here).
TEST_SCRIPTS += test/e2e/apptainer_def_test.sh

# scripts/finetune.sh, the fine-tuning recipe (docs/finetuning.md): HF weights, our checkpoint
# directory, text / a directory of documents / SFT JSONL, one process and mpirun, resume.
TEST_SCRIPTS += test/e2e/finetune_recipe_test.sh
