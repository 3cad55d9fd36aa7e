# Top-level build. Each folder contributes a fragment `<folder>/module.mk` that
# appends to the variables below and defines its own rules; this file only holds
# the common flags, the pattern rules and the aggregate targets.
#
#   make              build the programs (train_gpt2cu, gpt2_tokenizer, prep tools)
#   make test         build and run every test; ends with "N passed, N failed"
#   make bench        training-step benchmark (CPU backend vs PyTorch)
#   make bench-*      per-area benchmarks (tokenizer, dist, emu)
#   make profile-cpu  per-op profile of a CPU training step (dev/cpu/profile_cpu_step.cpp)
#   make vocab        fetch + verify the GPT-2 vocabulary (scripts/get_gpt2_vocab.sh)

.DEFAULT_GOAL := all
SHELL := /bin/bash

CXX      ?= g++
CC       ?= gcc
BUILD    := build
# Portable by default: a binary built on a login node must run on compute nodes of
# another CPU generation. x86-64-v3 (AVX2 + FMA) is every x86 server CPU since
# Haswell / Zen 1; OpenBLAS picks its GEMM kernels at run time either way.
# NATIVE=1 tunes for this machine's CPU instead.
ifeq ($(NATIVE),1)
OPT      ?= -O3 -march=native
else ifneq ($(findstring x86_64,$(shell $(CXX) -dumpmachine)),)
OPT      ?= -O3 -march=x86-64-v3 -mtune=generic
else
OPT      ?= -O3
endif
CXXSTD   := -std=c++17
# Backend ops take argument structs whose optional tensors a call leaves out
# by name ({.out = x, .inp = y}), so missing designated fields are intended.
WARN     := -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
CPPFLAGS := -I. -MMD -MP
CXXFLAGS := $(CXXSTD) $(OPT) -g $(WARN) -fopenmp -pthread
LDFLAGS  := -fopenmp -pthread
# nvcc, as clusters provide it: $(NVCC) if set (make or environment), else
# $CUDA_HOME/bin/nvcc or $CUDA_PATH/bin/nvcc (`module load cuda` sets them), else
# nvcc on PATH, else the default install location. CUDA_HOME follows nvcc.
ifeq ($(origin NVCC),undefined)
NVCC := $(firstword $(wildcard $(addsuffix /bin/nvcc,$(CUDA_HOME) $(CUDA_PATH))) \
          $(shell command -v nvcc 2>/dev/null) /usr/local/cuda/bin/nvcc)
endif
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(abspath $(NVCC))))
# The emulator needs the toolkit's headers even where nvcc is missing or elsewhere.
ifeq ($(wildcard $(CUDA_HOME)/include/cuda_runtime.h),)
CUDA_HOME := /usr/local/cuda
endif

comma := ,

# cuDNN's headers (fused attention, backend/cuda/cudnn_attention.cpp): $CUDNN_HOME/include,
# the toolkit, or the system. Without them the CUDA backend runs its own attention
# kernels and --attention cudnn is refused (backend/cuda/cudnn_attention_absent.cpp).
CUDNN_HOME ?=
CUDNN_INC_DIR := $(patsubst %/cudnn_graph.h,%,$(firstword $(wildcard $(if $(CUDNN_HOME),$(CUDNN_HOME)/include/cudnn_graph.h) \
                   $(CUDA_HOME)/include/cudnn_graph.h /usr/include/cudnn_graph.h /usr/include/x86_64-linux-gnu/cudnn_graph.h)))

# Filled in by the module fragments.
BINS          :=   # programs built by `make` at the repo root
TESTS         :=   # GoogleTest binaries run by `make test`
TEST_SCRIPTS  :=   # shell tests run by `make test` (pass = exit 0)
TEST_PREREQS  :=   # things `make test` needs first (vocab, data)
CLEAN_EXTRA   :=

# Prerequisites expand as a rule is read, so a module comes after those whose
# variables its rules name: the CUDA backend (backend/cuda/) after emu/ and
# backend/, the trainer after the CUDA backend, the dev/ tools after the trainer.
MODULES := $(filter-out train/module.mk dev/module.mk,$(sort $(wildcard */module.mk))) backend/cuda/module.mk \
           train/module.mk dev/module.mk
include $(MODULES)

all: $(BINS)
	@if [ -n "$(wildcard $(NVCC))" ]; then \
	  echo "built: train_gpt2cu with the CPU and CUDA backends (nvcc $(NVCC); $(CUDA_GENCODE));" \
	       "multi-GPU: $(if $(NCCL_INC_DIR),NCCL from $(NCCL_INC_DIR),no NCCL found (set NCCL_HOME));" \
	       "attention: $(if $(CUDNN_INC_DIR),cuDNN fused attention from $(CUDNN_INC_DIR),no cuDNN found (set CUDNN_HOME): flash kernels only)"; \
	else \
	  echo "built: train_gpt2cu with the CPU backend only: no nvcc (set NVCC=..., CUDA_HOME, or put nvcc on PATH)"; fi
	@echo "CPU GEMMs: $(if $(ONEDNN_INC_DIR),oneDNN from $(ONEDNN_INC_DIR),OpenBLAS: no oneDNN found (install libdnnl-dev or set ONEDNN_HOME))"

# Generic compile rules: sources anywhere in the tree -> build/<same path>.o
$(BUILD)/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -O2 -g -Wall -c $< -o $@

# .cu files compiled as C++ for the CPU build (the CUDA backend is selected at runtime).
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -x c++ -c $< -o $@

test: $(BINS) $(TEST_PREREQS) $(TESTS)
	@scripts/run_tests.sh $(TESTS) -- $(TEST_SCRIPTS)

# The whole suite once per OpenBLAS core type (scripts/test_blas_variants.sh): the
# CPU backend's GEMMs round as on the servers that select those kernels. Logs in
# build/test-blas/. CI keeps the machine's default (make test).
TEST_OPENBLAS_CORETYPES ?= Haswell SkylakeX Zen
test-blas-variants: $(BINS) $(TEST_PREREQS) $(TESTS)
	@scripts/test_blas_variants.sh $(TEST_OPENBLAS_CORETYPES) -- $(TESTS) -- $(TEST_SCRIPTS)

clean:
	rm -rf $(BUILD) $(BINS) $(CLEAN_EXTRA)

# What this build resolved (test/build/build_config_test.sh checks the nvcc search).
print-build-config:
	@echo "NVCC=$(NVCC)"; echo "CUDA_HOME=$(CUDA_HOME)"; echo "OPT=$(OPT)"
	@echo "CUDA=$(if $(wildcard $(NVCC)),yes,no)"; echo "NCCL=$(if $(NCCL_INC_DIR),$(NCCL_INC_DIR),no)"
	@echo "CUDNN=$(if $(CUDNN_INC_DIR),$(CUDNN_INC_DIR),no)"
	@echo "ONEDNN=$(if $(ONEDNN_INC_DIR),$(ONEDNN_INC_DIR),no)"

.PHONY: all test test-blas-variants clean print-build-config

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
