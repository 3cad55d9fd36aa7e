#!/usr/bin/env bash
# The emulator's test kernels are ordinary CUDA: they must compile with nvcc for
# sm_80 and sm_90. Builds them (make emu-nvcc) and checks that every __global__
# kernel of the file has a --resource-usage entry for both architectures; the
# report is kept in build/emu/nvcc_resource_usage.txt.
exec "$(dirname "$0")/../check_nvcc_report.sh" emu-nvcc build/emu/nvcc_resource_usage.txt test/emu/kernels.cu
