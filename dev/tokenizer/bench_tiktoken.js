// encode_ordinary throughput of npm tiktoken (WASM) on a file; prints "MB/s tokens reps wall-MB/s"
// (the first figure per second of this process's CPU time, like bench_tokenizer).
// usage: node bench_tiktoken.js NODE_MODULES_DIR FILE [MIN_SECONDS]
"use strict";
const path = require("path");
const [modulesDir, file, minSeconds = "2"] = process.argv.slice(2);
const requireThere = require("module").createRequire(path.resolve(modulesDir, "..", "bench.js"));
const { Tiktoken } = requireThere("tiktoken/lite");
const gpt2 = requireThere("tiktoken/encoders/gpt2.json");
const enc = new Tiktoken(gpt2.bpe_ranks, gpt2.special_tokens, gpt2.pat_str);
const text = require("fs").readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text, "utf8");
let tokens = enc.encode_ordinary(text).length;  // warm-up
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
const cpuStart = cpu();
const start = process.hrtime.bigint();
let reps = 0, seconds = 0;
do {
  tokens = enc.encode_ordinary(text).length;
  ++reps;
  seconds = cpu() - cpuStart;
} while (seconds < Number(minSeconds));
const wall = Number(process.hrtime.bigint() - start) / 1e9;
console.log(`${(reps * bytes / seconds / 1e6).toFixed(2)} MB/s  ${tokens} tokens  ${reps} reps  ` +
            `${(reps * bytes / wall / 1e6).toFixed(2)} wall-MB/s`);
enc.free();
