# Top-level build. Each folder contributes a fragment `<folder>/module.mk` that
# appends to the variables below and defines its own rules; this file only holds
# the common flags, the pattern rules and the aggregate targets.
#
#   make              build the programs (train_gpt2cu, gpt2_tokenizer, prep tools)
#   make test         build and run every test; ends with "N passed, N failed"
#   make bench        training-step benchmark (CPU backend vs PyTorch)
#   make bench-*      per-area benchmarks (tokenizer, dist, emu)
#   make vocab        fetch + verify the GPT-2 vocabulary (scripts/get_gpt2_vocab.sh)

.DEFAULT_GOAL := all
SHELL := /bin/bash

CXX      ?= g++
CC       ?= gcc
BUILD    := build
OPT      ?= -O3 -march=native
CXXSTD   := -std=c++17
WARN     := -Wall -Wextra -Wno-unused-parameter
CPPFLAGS := -I. -MMD -MP
CXXFLAGS := $(CXXSTD) $(OPT) -g $(WARN) -fopenmp -pthread
LDFLAGS  := -fopenmp -pthread
NVCC     ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= /usr/local/cuda

# Filled in by the module fragments.
BINS          :=   # programs built by `make` at the repo root
TESTS         :=   # GoogleTest binaries run by `make test`
TEST_SCRIPTS  :=   # shell tests run by `make test` (pass = exit 0)
TEST_PREREQS  :=   # things `make test` needs first (vocab, data)
CLEAN_EXTRA   :=

include $(sort $(wildcard */module.mk))

all: $(BINS)

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

clean:
	rm -rf $(BUILD) $(BINS) $(CLEAN_EXTRA)

.PHONY: all test clean

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
