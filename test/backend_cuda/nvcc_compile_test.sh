#!/usr/bin/env bash
# Every kernel of backend/cuda/*.cuh is real CUDA: backend/cuda/cuda_backend.cu (which
# includes all of them) must compile with nvcc for sm_80 and sm_90, and each
# __global__ function (each is a template over the storage type, so at least
# one instantiation) must appear in the --resource-usage report of both
# (build/backend/cuda/nvcc_resource_usage.txt; docs/kernels.md tabulates it).
exec "$(dirname "$0")/../check_nvcc_report.sh" kernels-nvcc build/backend/cuda/nvcc_resource_usage.txt backend/cuda/*.cuh
