#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "test/temp_dir.h"
#include "train/options.h"
#include "train/run_plan.h"
#include "util/checked_io.h"

namespace gpt2 {
namespace {

// Parses a command line given as words (argv[0] added).
TrainOptions parse(std::vector<std::string> words, bool* ran = nullptr) {
  words.insert(words.begin(), "train_gpt2cu");
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  TrainOptions o;
  bool r = parse_train_options(static_cast<int>(argv.size()), argv.data(), &o);
  if (ran) *ran = r;
  return o;
}

std::string error_of(std::vector<std::string> words) {
  try {
    parse(words);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Options, DefaultsAndValues) {
  TrainOptions o = parse({"-B", "8", "--seq-len", "128", "--lr=1e-3", "--no-shuffle", "--model", "d6",
                          "--config", "n_embd=96", "--zero-stage", "2", "-o", "out"});
  EXPECT_EQ(o.batch_size, 8);
  EXPECT_EQ(o.seq_len, 128);
  EXPECT_FLOAT_EQ(o.schedule.max_lr, 1e-3f);
  EXPECT_TRUE(o.no_shuffle);
  EXPECT_EQ(o.model, "d6");
  EXPECT_EQ(o.config_overrides, "n_embd=96");
  EXPECT_EQ(o.zero_stage, 2);
  EXPECT_EQ(o.output_dir, "out");
  EXPECT_EQ(o.grad_clip, 1.0f);      // untouched default
  EXPECT_EQ(o.schedule.kind, LrScheduleKind::kCosine);
  EXPECT_EQ(o.gelu_fusion, "on");
  EXPECT_EQ(parse({"--gelu-fusion", "off"}).gelu_fusion, "off");
}

TEST(Options, HelpListsEveryFlagOfTheIssue) {
  bool ran = true;
  parse({"--help"}, &ran);
  EXPECT_FALSE(ran);
  const std::string help = train_options_help("train_gpt2cu");
  for (const char* f : {"--model", "--config", "--train-data", "--val-data", "-B, --batch-size", "-T, --seq-len",
                        "--total-batch-tokens", "--lr ", "--lr-schedule", "--warmup-steps", "--final-lr-frac",
                        "--weight-decay", "--grad-clip", "--max-steps", "--val-every", "--val-steps",
                        "--sample-every", "--gen-tokens", "--prompt", "--seed", "--no-shuffle", "--output-dir",
                        "--checkpoint-every", "--keep-checkpoints", "--resume", "--device", "--threads",
                        "--log-jsonl", "--zero-stage"})
    EXPECT_NE(help.find(f), std::string::npos) << f;
}

TEST(Options, BadInputIsAnErrorNamingTheFlag) {
  EXPECT_NE(error_of({"--bogus"}).find("unknown option '--bogus'"), std::string::npos);
  EXPECT_NE(error_of({"-Z"}).find("unknown option"), std::string::npos);
  EXPECT_NE(error_of({"-B"}).find("--batch-size needs a value"), std::string::npos);
  EXPECT_NE(error_of({"-B", "four"}).find("--batch-size: invalid value 'four'"), std::string::npos);
  EXPECT_NE(error_of({"-B", "0"}).find("--batch-size"), std::string::npos);
  EXPECT_NE(error_of({"--lr", "1e-3x"}).find("--lr: invalid value"), std::string::npos);
  EXPECT_NE(error_of({"--lr", "nan"}).find("--lr"), std::string::npos);
  EXPECT_NE(error_of({"--lr-schedule", "cosin"}).find("one of cosine, linear, constant, wsd"), std::string::npos);
  EXPECT_NE(error_of({"--device", "tpu"}).find("--device"), std::string::npos);
  EXPECT_NE(error_of({"--zero-stage", "4"}).find("--zero-stage"), std::string::npos);
  EXPECT_EQ(parse({"--zero-stage", "3", "--offload-optimizer", "cpu"}).offload_optimizer, true);
  EXPECT_NE(error_of({"--offload-optimizer", "nvme"}).find("--offload-optimizer"), std::string::npos);
  EXPECT_NE(error_of({"--device", "cpu", "--offload-optimizer", "cpu"}).find("on the CPU already"), std::string::npos);
  EXPECT_NE(error_of({"--gelu-fusion", "yes"}).find("--gelu-fusion"), std::string::npos);
  EXPECT_NE(error_of({"--resume"}).find("--resume needs --output-dir"), std::string::npos);
  EXPECT_NE(error_of({"--no-shuffle=1"}).find("takes no value"), std::string::npos);
  EXPECT_NE(error_of({"stray"}).find("unknown option 'stray'"), std::string::npos);
}

TEST(Options, DescribeCoversEveryOption) {
  TrainOptions o;
  auto d = describe_train_options(o);
  EXPECT_GT(d.size(), 30u);
  bool found = false;
  for (auto& kv : d)
    if (kv.first == "batch-size") found = kv.second == "4";
  EXPECT_TRUE(found);
}

TEST(ResumeOptions, MaxStepsZeroInitFromAndResetSchedule) {
  EXPECT_NE(error_of({"--max-steps", "0"}).find("--max-steps must be positive, or -1 for one epoch"),
            std::string::npos);
  EXPECT_EQ(parse({"--max-steps", "-1"}).max_steps, -1);
  EXPECT_EQ(parse({"--max-steps", "7"}).max_steps, 7);
  TrainOptions o = parse({"--init-from", "out/run1", "--resume", "-o", "out/run2", "--reset-schedule"});
  EXPECT_EQ(o.init_from, "out/run1");
  EXPECT_FALSE(o.given.count("model"));
  EXPECT_TRUE(o.resume);
  EXPECT_TRUE(o.reset_schedule);
  EXPECT_TRUE(parse({"--model", "d12"}).given.count("model"));
  EXPECT_NE(error_of({"--init-from", "a.bin", "--model", "b.bin"}).find("--init-from and --model"),
            std::string::npos);
  EXPECT_NE(error_of({"--init-from", "a.bin", "--config", "n_layer=2"}).find("--config"), std::string::npos);
}

}  // namespace
}  // namespace gpt2

namespace gpt2 {
namespace {

TEST(Options, DryRunTakesAListOfWorldSizesAndIsAModeOfItsOwn) {
  EXPECT_EQ(parse({"--dry-run", "8,64", "--zero-stage", "2"}).dry_run_worlds, (std::vector<int>{8, 64}));
  EXPECT_EQ(parse({"--dry-run=1"}).dry_run_worlds, (std::vector<int>{1}));
  EXPECT_TRUE(parse({}).dry_run_worlds.empty());
  for (const char* bad : {"0", "8,", ",8", "8,,64", "x", "-1", "2000000"})
    EXPECT_THROW(parse({"--dry-run", bad}), std::runtime_error) << bad;
  EXPECT_THROW(parse({"--dry-run", "8", "--generate"}), std::runtime_error);
  EXPECT_THROW(parse({"--dry-run", "8", "--eval-only"}), std::runtime_error);
  EXPECT_EQ(parse({"--recompute", "2"}).recompute, 2);
  EXPECT_THROW(parse({"--recompute", "3"}), std::runtime_error);
}

}  // namespace
}  // namespace gpt2

namespace gpt2 {
namespace {

// --total-batch-tokens over B*T*world: exact, positive, and not past kMaxGradAccum
// micro-batches (2^39 + 128 tokens at 128 per micro-batch once ran as 1: an int cast).
TEST(GradAccum, DividesExactlyAndNeverOverflows) {
  EXPECT_EQ(grad_accum_for(512, 128), 4);
  EXPECT_EQ(grad_accum_for(kMaxGradAccum * 128, 128), kMaxGradAccum);
  EXPECT_THROW(grad_accum_for(500, 128), UsageError);  // main exits 2, as for the parser's errors
  EXPECT_THROW(grad_accum_for(0, 128), UsageError);
  try {
    grad_accum_for(549755814016LL, 128);
    ADD_FAILURE() << "2^32 + 1 micro-batches accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--total-batch-tokens 549755814016 needs 4294967297 micro-batches"),
              std::string::npos) << e.what();
  }
}

// Flags that would be silently ignored or replaced, and values found bad only
// at start-up, are errors of the command line (exit 2).
TEST(Options, IgnoredOrReplacedFlagsAreUsageErrors) {
  EXPECT_EQ(error_of({"--checkpoint-every", "5"}),
            "--checkpoint-every needs --output-dir (where checkpoints are written; without it none is)");
  EXPECT_NE(error_of({"--keep-checkpoints", "2"}).find("--keep-checkpoints needs --output-dir"), std::string::npos);
  EXPECT_EQ(parse({"--checkpoint-every", "5", "--keep-checkpoints", "2", "-o", "out"}).keep_checkpoints, 2);
  EXPECT_EQ(error_of({"--config", "n_layer=2", "--config", "n_head=2"}),
            "--config given twice ('n_layer=2', then 'n_head=2'): give every override in one list, e.g. --config "
            "n_layer=2,n_head=2");
  EXPECT_EQ(error_of({"--config", "n_layer=0"}), "--config: 'n_layer=0' needs a positive integer value");
  EXPECT_NE(error_of({"--config", "n_head=5"}).find("divisible by n_head (5)"), std::string::npos);
  EXPECT_NE(error_of({"--config", "depth=2"}).find("unknown key 'depth'"), std::string::npos);
  EXPECT_NE(error_of({"--model", "dx"}).find("--model dx"), std::string::npos);
  EXPECT_NE(error_of({"--model", "/no/such/model.bin", "--config", "n_layer=2"}).find("--config applies to dN"),
            std::string::npos);
  EXPECT_EQ(error_of({"--eval-only", "-T", "32", "--eval-stride", "33"}),
            "--eval-stride 33 is larger than --seq-len 32 (tokens between windows would never be scored)");
  EXPECT_EQ(parse({"--eval-only", "-T", "32", "--eval-stride", "32"}).eval_stride, 32);
}

TEST(Options, MemoryCheck) {
  EXPECT_EQ(parse({}).memory_check, "on");
  EXPECT_EQ(parse({"--memory-check", "warn"}).memory_check, "warn");
  EXPECT_EQ(parse({"--memory-check=off"}).memory_check, "off");
  EXPECT_NE(error_of({"--memory-check", "no"}).find("one of on, warn, off"), std::string::npos);
}

// --epochs, --keep-best, early stopping, --resume [PATH] / --resume-from PATH.
TEST(Options, EpochsKeepBestAndEarlyStopping) {
  TrainOptions o = parse({"--epochs", "2.5", "--keep-best", "-o", "out", "--early-stopping-patience", "3",
                          "--early-stopping-threshold", "0.01"});
  EXPECT_EQ(o.epochs, 2.5);
  EXPECT_TRUE(o.keep_best);
  EXPECT_EQ(o.early_stopping_patience, 3);
  EXPECT_EQ(o.early_stopping_threshold, 0.01);  // a double: 0.01, not float's 0.0099999998
  EXPECT_EQ(parse({"--epochs", "0.1"}).epochs, 0.1);
  EXPECT_EQ(parse({"--epochs", "3", "--max-steps", "7"}).max_steps, 7);  // both accepted: --max-steps wins at run time
  EXPECT_EQ(error_of({"--epochs", "0"}), "--epochs: invalid value '0' (expected a number in (0, 1e6])");
  EXPECT_EQ(error_of({"--epochs", "-1"}), "--epochs: invalid value '-1' (expected a number in (0, 1e6])");
  // one range quoted however far out the value is
  EXPECT_EQ(error_of({"--epochs", "1e30"}), "--epochs: invalid value '1e30' (expected a number in (0, 1e6])");
  EXPECT_EQ(error_of({"--epochs", "1e31"}), "--epochs: invalid value '1e31' (expected a number in (0, 1e6])");
  EXPECT_EQ(error_of({"--keep-best"}), "--keep-best needs --output-dir (where the best checkpoint is kept)");
  EXPECT_EQ(error_of({"--keep-best", "-o", "x", "--val-every", "0"}), "--keep-best needs validation: --val-every is 0");
  EXPECT_EQ(error_of({"--early-stopping-patience", "2", "--val-every", "0"}),
            "--early-stopping-patience needs validation: --val-every is 0");
  EXPECT_EQ(error_of({"--early-stopping-threshold", "0.1"}),
            "--early-stopping-threshold needs --early-stopping-patience");
  EXPECT_EQ(error_of({"--early-stopping-threshold", "-0.1", "--early-stopping-patience", "1"}),
            "--early-stopping-threshold: invalid value '-0.1' (expected a number in [0, 1e+09])");
  EXPECT_EQ(error_of({"--eval-only", "--model", "m.bin", "--epochs", "2"}),
            "--eval-only does not train: --epochs has no meaning");
  EXPECT_EQ(error_of({"--generate", "--model", "m.bin", "--keep-best"}),
            "--generate does not train: --keep-best has no meaning");
}

TEST(Options, ResumeTakesAnOptionalPath) {
  TrainOptions o = parse({"--resume", "-o", "out"});
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.resume_from, "");  // the next word is a flag: plain --resume
  o = parse({"-o", "out", "--resume", "runs/a/DONE_00000020", "-B", "2"});
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.resume_from, "runs/a/DONE_00000020");
  EXPECT_EQ(o.output_dir, "out");
  EXPECT_EQ(o.batch_size, 2);
  o = parse({"--resume=runs/a/model_00000020.bin"});
  EXPECT_EQ(o.resume_from, "runs/a/model_00000020.bin");
  EXPECT_EQ(o.output_dir, "runs/a");  // defaults to the checkpoint's directory
  o = parse({"--resume-from", "runs/b/DONE_00000040"});
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.resume_from, "runs/b/DONE_00000040");
  EXPECT_EQ(o.output_dir, "runs/b");
  EXPECT_EQ(error_of({"--resume-from", "runs/b/model.bin"}).rfind("--resume-from runs/b/model.bin: not a checkpoint", 0),
            0u);
  EXPECT_EQ(error_of({"--resume-from", "runs/b/DONE_00000040", "--resume-fallback"}),
            "--resume-fallback replaces a corrupt newest checkpoint by an older one; --resume-from "
            "runs/b/DONE_00000040 names the checkpoint: give one");
  EXPECT_EQ(error_of({"--resume="}), "--resume-from: empty path");
  EXPECT_EQ(error_of({"--resume"}), "--resume needs --output-dir (where the checkpoints are)");
  const std::string help = train_options_help("train_gpt2cu");
  EXPECT_NE(help.find("      --resume [PATH]             continue from the newest"), std::string::npos);
}

}  // namespace
}  // namespace gpt2

namespace gpt2 {
namespace {

std::string shown(const TrainOptions& o, const std::string& flag) {
  for (const auto& kv : describe_train_options(o))
    if (kv.first == flag) return kv.second;
  return "(not described)";
}

// --dropout P sets the three rates, K=P items those named;
// the rest stay the model's (-1 here, resolved by run_dropout).
TEST(Options, DropoutSetsAllOrTheNamedRates) {
  TrainOptions o = parse({});
  EXPECT_FALSE(o.dropout_given());
  EXPECT_EQ(o.dropout_embd, -1.0f);
  EXPECT_EQ(shown(o, "dropout"), "from the model");
  o = parse({"--dropout", "0.1"});
  EXPECT_EQ(o.dropout_embd, 0.1f);
  EXPECT_EQ(o.dropout_resid, 0.1f);
  EXPECT_EQ(o.dropout_attn, 0.1f);
  EXPECT_EQ(shown(o, "dropout"), "embd=0.1,resid=0.1,attn=0.1");
  o = parse({"--dropout=0"});
  EXPECT_TRUE(o.dropout_given());
  EXPECT_EQ(o.dropout_resid, 0.0f);
  o = parse({"--dropout", "attn=0.05,embd=0.2"});
  EXPECT_EQ(o.dropout_embd, 0.2f);
  EXPECT_EQ(o.dropout_resid, -1.0f);
  EXPECT_EQ(o.dropout_attn, 0.05f);
  EXPECT_EQ(shown(o, "dropout"), "embd=0.2,resid=model,attn=0.05");
  EXPECT_EQ(parse({"--dropout", "resid=0"}).dropout_resid, 0.0f);
  EXPECT_EQ(parse({"--dropout", "-0"}).dropout_attn, 0.0f);
  EXPECT_FALSE(std::signbit(parse({"--dropout", "-0"}).dropout_attn));
  const std::string help = train_options_help("train_gpt2cu");
  EXPECT_NE(help.find("      --dropout P|K=P,...         dropout in training forwards"), std::string::npos);
}

TEST(Options, BadDropoutIsAnErrorNamingTheFlagAndThePart) {
  const std::string rate = " (expected a rate in [0, 1))";
  EXPECT_EQ(error_of({"--dropout", "1"}), "--dropout: invalid value '1'" + rate);
  EXPECT_EQ(error_of({"--dropout", "-0.1"}), "--dropout: invalid value '-0.1'" + rate);
  EXPECT_EQ(error_of({"--dropout", "0.99999999"}), "--dropout: invalid value '0.99999999'" + rate);  // 1 as a float
  EXPECT_EQ(error_of({"--dropout", "nan"}), "--dropout: invalid value 'nan'" + rate);
  EXPECT_EQ(error_of({"--dropout", "0.1x"}), "--dropout: invalid value '0.1x'" + rate);
  EXPECT_EQ(error_of({"--dropout", ""}), "--dropout: invalid value ''" + rate);
  EXPECT_EQ(error_of({"--dropout", "embd=0.1,resid=1.5"}), "--dropout: invalid value 'resid=1.5'" + rate);
  EXPECT_EQ(error_of({"--dropout", "attn="}), "--dropout: invalid value 'attn='" + rate);
  const std::string keys = " (expected P, or K=P items with K one of embd, resid, attn)";
  EXPECT_EQ(error_of({"--dropout", "embd=0.1,mlp=0.1"}), "--dropout: invalid value 'mlp=0.1'" + keys);
  EXPECT_EQ(error_of({"--dropout", "embd=0.1,"}), "--dropout: invalid value ''" + keys);
  EXPECT_EQ(error_of({"--dropout", "embd=0.1,0.2"}), "--dropout: invalid value '0.2'" + keys);
  EXPECT_EQ(error_of({"--dropout", "embd=0.1,embd=0.2"}), "--dropout: 'embd' given twice");
  EXPECT_EQ(error_of({"--dropout", "0.1", "--dropout", "attn=0"}),
            "--dropout given twice (then 'attn=0'): give every rate in one list, e.g. --dropout "
            "embd=0.1,resid=0.1,attn=0");
  EXPECT_EQ(error_of({"--dropout"}), "--dropout needs a value (P|K=P,...)");
  EXPECT_EQ(error_of({"--eval-only", "--model", "m.bin", "--dropout", "0.1"}),
            "--eval-only does not train: --dropout has no meaning");
  EXPECT_EQ(error_of({"--generate", "--model", "m.bin", "--dropout", "0"}),
            "--generate does not train: --dropout has no meaning");
}

// The rates a run trains with: --dropout's, the others the model's (an HF
// directory's config.json, GPT2Config's 0.1 where a key is absent; 0 for a
// preset or an llm.c model file), and the banner's account of them.
// The pretraining flags: values, and the errors naming the flag.
TEST(Options, PretrainingFlags) {
  TrainOptions o = parse({"--overfit-batch", "--milestone-every", "100", "-o", "out"});
  EXPECT_TRUE(o.overfit_batch);
  EXPECT_EQ(o.milestone_every, 100);
  EXPECT_NE(error_of({"--milestone-every", "10"}).find("--milestone-every needs --output-dir"), std::string::npos);
  EXPECT_NE(error_of({"--milestone-every", "-1", "-o", "x"}).find("--milestone-every: invalid value"),
            std::string::npos);
  EXPECT_NE(error_of({"--eval-only", "--overfit-batch"}).find("--overfit-batch has no meaning"), std::string::npos);
  o = parse({"--skip-loss-z", "6", "--skip-grad-z=4.5", "--spike-window", "32"});
  EXPECT_EQ(o.skip_loss_z, 6.0);
  EXPECT_EQ(o.skip_grad_z, 4.5);
  EXPECT_EQ(o.spike_window, 32);
  EXPECT_EQ(parse({}).spike_window, 128);
  EXPECT_NE(error_of({"--skip-loss-z", "-1"}).find("--skip-loss-z: invalid value '-1'"), std::string::npos);
  EXPECT_NE(error_of({"--spike-window", "1"}).find("--spike-window: invalid value"), std::string::npos);
  // a window without a guard would be ignored: refused, even at its default value
  EXPECT_EQ(error_of({"--spike-window", "128"}),
            "--spike-window is the spike guards' window: it needs --skip-loss-z or --skip-grad-z");
  EXPECT_EQ(parse({"--skip-grad-z", "3", "--spike-window", "16"}).spike_window, 16);
  // the same for the bound on skipped steps, which only --on-nan skip skips
  EXPECT_EQ(error_of({"--max-nan-skips", "3"}),
            "--max-nan-skips bounds the steps --on-nan skip skips: it needs --on-nan skip");
  EXPECT_EQ(error_of({"--on-nan", "stop", "--max-nan-skips", "10"}),
            "--max-nan-skips bounds the steps --on-nan skip skips: it needs --on-nan skip");
  EXPECT_EQ(parse({"--on-nan", "skip", "--max-nan-skips", "3"}).max_nan_skips, 3);
  // no step or validation record to write
  EXPECT_EQ(error_of({"--eval-only", "--log-jsonl", "l.jsonl"}), "--eval-only does not train: --log-jsonl has no meaning");
  EXPECT_EQ(error_of({"--generate", "--log-jsonl", "l.jsonl"}), "--generate does not train: --log-jsonl has no meaning");
  // a mode's flag outside its mode is refused at any value
  EXPECT_EQ(error_of({"--num-samples", "1"}), "--num-samples needs --generate");
  EXPECT_EQ(error_of({"--eval-json", "r.json"}), "--eval-json needs --eval-only");
  // checked when parsed, so a bad value fails the same with or without a launcher
  EXPECT_EQ(error_of({"--rendezvous", "udp:x"}), "--rendezvous 'udp:x': want tcp, tcp:HOST:PORT or file:DIR");
  EXPECT_EQ(error_of({"--rendezvous", "tcp:host"}), "--rendezvous 'tcp:host': want tcp:HOST:PORT with a port 1-65535");
  EXPECT_EQ(parse({"--rendezvous", "file:/shared/r"}).rendezvous, "file:/shared/r");
  EXPECT_NE(error_of({"--generate", "--skip-grad-z", "3"}).find("--skip-grad-z has no meaning"), std::string::npos);
  EXPECT_EQ(parse({"--eval-hellaswag", "hs.jsonl"}).eval_hellaswag, "hs.jsonl");
  o = parse({"--profile-steps", "10:12"});
  EXPECT_EQ(o.profile_first, 10);
  EXPECT_EQ(o.profile_last, 12);
  EXPECT_NE(error_of({"--profile-steps", "12"}).find("--profile-steps: invalid value '12'"), std::string::npos);
  EXPECT_NE(error_of({"--profile-steps", "0:2"}).find("--profile-steps: invalid value '0'"), std::string::npos);
  EXPECT_NE(error_of({"--eval-hellaswag", "h", "--val-every", "0"}).find("--eval-hellaswag runs with validation"),
            std::string::npos);
  EXPECT_EQ(parse({"--eval-only", "--eval-hellaswag", "h"}).eval_hellaswag, "h");  // with no validation to run
  EXPECT_NE(error_of({"--generate", "--eval-hellaswag", "h"}).find("does not apply to --generate"), std::string::npos);
}

// Every flag that only training reads is refused by --eval-only and --generate,
// not ignored; the flags either mode reads stay accepted there.
TEST(Options, TrainingFlagsRefusedOutsideTraining) {
  const std::vector<std::vector<std::string>> training = {
      {"--train-data", "t.bin"}, {"--total-batch-tokens", "64"}, {"--no-shuffle"}, {"--lr", "1e-3"},
      {"--lr-schedule", "wsd"}, {"--warmup-steps", "2"}, {"--final-lr-frac", "0"}, {"--wsd-decay-frac", "0.1"},
      {"--weight-decay", "0.1"}, {"--beta1", "0.8"}, {"--beta2", "0.9"}, {"--adam-eps", "1e-6"},
      {"--grad-clip", "0"}, {"--max-steps", "5"}, {"--on-nan", "skip"}, {"--spike-window", "8"},
      {"--val-every", "0"}, {"--val-steps", "1"}, {"--sample-every", "0"}, {"--output-dir", "o"},
      {"--milestone-every", "2"}, {"--early-stopping-threshold", "0.1"}, {"--reset-schedule"},
      {"--save-dtype", "bf16"}, {"--save-hf", "hf"}, {"--recompute", "1"}, {"--memory-check", "off"},
      {"--peak-tflops", "100"}};
  for (const char* mode : {"--eval-only", "--generate"})
    for (std::vector<std::string> words : training) {
      const std::string flag = words[0];
      words.insert(words.begin(), {mode, "--model", "m.bin"});
      EXPECT_EQ(error_of(words), std::string(mode) + " does not train: " + flag + " has no meaning");
    }
  EXPECT_EQ(error_of({"--eval-only", "--max-steps", "5", "--lr", "1"}), "--eval-only does not train: --lr has no meaning");
  const TrainOptions e = parse({"--eval-only", "--model", "m.bin", "--val-data", "v.bin", "-B", "3", "-T", "32",
                                "--eval-stride", "8", "--device", "cpu", "--threads", "1", "--dtype", "fp32",
                                "--tf32", "off", "--comm-timeout", "5", "--eval-json", "r.json"});
  EXPECT_EQ(e.batch_size, 3);
  const TrainOptions g = parse({"--generate", "--init-from", "ck", "--seed", "5", "--gen-tokens", "8",
                                "--temperature", "0.9", "--top-k", "4", "--top-p", "0.9", "--prompt", "x",
                                "--num-samples", "2", "--no-stop-at-eos", "-T", "16", "-B", "2"});
  EXPECT_EQ(g.seed, 5u);
}

// run_dropout of the options these flags give, for their --model.
RunDropout dropout_of(std::vector<std::string> flags) {
  const TrainOptions o = parse(std::move(flags));
  return run_dropout(o, o.model);
}

TEST(RunDropout, FlagsOverTheModelsRates) {
  const std::string hf = temp_dir("run_dropout");
  write_text_file_atomic(hf + "/config.json", R"({"model_type": "gpt2", "resid_pdrop": 0.2, "attn_pdrop": 0})");
  TrainOptions o = parse({"--model", hf});
  RunDropout d = run_dropout(o, o.model);
  EXPECT_EQ(d.rates.embd, 0.1f);  // absent: GPT2Config's default
  EXPECT_EQ(d.rates.resid, 0.2f);
  EXPECT_EQ(d.rates.attn, 0.0f);
  EXPECT_EQ(d.described, "embd 0.1, resid 0.2, attn 0 (from " + hf + "/config.json)");
  d = dropout_of({"--model", hf, "--dropout", "attn=0.3"});
  EXPECT_EQ(d.rates.attn, 0.3f);
  EXPECT_EQ(d.rates.resid, 0.2f);
  EXPECT_EQ(d.described, "embd 0.1, resid 0.2, attn 0.3 (attn: --dropout; embd, resid: from " + hf + "/config.json)");
  d = dropout_of({"--model", hf, "--dropout", "0"});
  EXPECT_FALSE(d.rates.any());
  EXPECT_EQ(d.described, "embd 0, resid 0, attn 0 (--dropout)");
  d = dropout_of({"--model", "d2"});
  EXPECT_FALSE(d.rates.any());
  EXPECT_EQ(d.described, "embd 0, resid 0, attn 0 (none in a random init; --dropout sets them)");
  d = dropout_of({"--model", "d2", "--dropout", "resid=0.1"});
  EXPECT_EQ(d.rates.resid, 0.1f);
  EXPECT_EQ(d.described, "embd 0, resid 0.1, attn 0 (resid: --dropout; embd, attn: none in a random init)");
  write_text_file_atomic(hf + "/model.bin", "not read: a model file has no rates");
  EXPECT_EQ(dropout_of({"--model", hf + "/model.bin"}).described,
            "embd 0, resid 0, attn 0 (none in an llm.c model file; --dropout sets them)");
  write_text_file_atomic(hf + "/config.json", R"({"model_type": "gpt2", "embd_pdrop": 1.0})");
  try {
    dropout_of({"--model", hf});
    ADD_FAILURE() << "embd_pdrop 1.0 accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), hf + "/config.json: 'embd_pdrop' must be a number in [0, 1) (got 1.0)");
  }
}

}  // namespace
}  // namespace gpt2
