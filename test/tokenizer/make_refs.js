// Generates the reference token ids the tokenizer tests compare against, with the npm packages
// tiktoken (WASM build of OpenAI's tokenizer; tiktoken/lite + encoders/gpt2.json, fully offline)
// and gpt-3-encoder (OpenAI's original JS port).
//
// usage: node make_refs.js NODE_MODULES_DIR OUT_DIR TINYSHAKESPEARE_TXT STRESS_TXT
//
// Writes into OUT_DIR (ids space-separated, one line per case):
//   stress.lines.txt            the stress text's lines (each with its "\n"), copied as input
//   stress.lines.tiktoken       encode_ordinary of each line
//   stress.lines.gpt3           gpt-3-encoder's encode of each line
//   stress.whole.tiktoken       encode_ordinary of the whole stress text (1 line)
//   stress.jsonl                the stress lines as JSONL documents {"id", "meta", "text"}
//   shakespeare.whole.tiktoken  encode_ordinary of the whole of tinyshakespeare (1 line)
//   shakespeare.whole.gpt3      same with gpt-3-encoder
//   shakespeare.llmc.tiktoken   llm.c's dev/data/tinyshakespeare.py stream: "<|endoftext|>" before
//                               the text and after every "\n\n", encoded with that special allowed
//   unicode_sweep.txt           probe lines covering every code point of planes 0-3 and 14
//   unicode_sweep.tiktoken      encode_ordinary of each probe line
//   invalid_utf8.cases          hex byte strings that are not valid UTF-8, one per line
//   invalid_utf8.replaced.tiktoken  ids of those after Node's U+FFFD replacement
//   long.cases / long.tiktoken  long runs (hex-encoded text) and their ids
"use strict";
const fs = require("fs");
const path = require("path");

const [modulesDir, outDir, shakespearePath, stressPath] = process.argv.slice(2);
if (!stressPath) {
  console.error("usage: node make_refs.js NODE_MODULES_DIR OUT_DIR TINYSHAKESPEARE_TXT STRESS_TXT");
  process.exit(2);
}
// Resolve packages as if from a file beside NODE_MODULES_DIR, so their "exports" maps apply.
const requireThere = require("module").createRequire(path.resolve(modulesDir, "..", "refs.js"));
const { Tiktoken } = requireThere("tiktoken/lite");
const gpt2 = requireThere("tiktoken/encoders/gpt2.json");
const gpt3 = requireThere("gpt-3-encoder");
const enc = new Tiktoken(gpt2.bpe_ranks, gpt2.special_tokens, gpt2.pat_str);

fs.mkdirSync(outDir, { recursive: true });
const out = (name, text) => fs.writeFileSync(path.join(outDir, name), text);
const ids = (arr) => Array.from(arr).join(" ");

// Lines keep their "\n" so that whitespace handling at line ends is exercised.
const splitLines = (text) => text.match(/[^\n]*\n|[^\n]+$/g) || [];

const stress = fs.readFileSync(stressPath, "utf8");
const stressLines = splitLines(stress);
out("stress.lines.txt", stressLines.join(""));
out("stress.lines.tiktoken", stressLines.map((l) => ids(enc.encode_ordinary(l)) + "\n").join(""));
out("stress.lines.gpt3", stressLines.map((l) => ids(gpt3.encode(l)) + "\n").join(""));
out("stress.whole.tiktoken", ids(enc.encode_ordinary(stress)) + "\n");
// JSONL fixture for prepare_data: one document per stress line, other fields around "text".
out("stress.jsonl", stressLines.map((l, i) => JSON.stringify({ id: i, meta: { n: [i, "x"] }, text: l })).join("\n") + "\n");

const shakespeare = fs.readFileSync(shakespearePath, "utf8");
out("shakespeare.whole.tiktoken", ids(enc.encode_ordinary(shakespeare)) + "\n");
// gpt-3-encoder grows its output with Array.concat per word (quadratic), so feed it pieces cut
// where no regex match can straddle: after a "\n" that has non-space on both sides (that "\n"
// is a token of its own either way).
const gpt3Long = (text) => text.split(/(?<=\S\n)(?=\S)/u).map((p) => ids(gpt3.encode(p))).join(" ");
out("shakespeare.whole.gpt3", gpt3Long(shakespeare) + "\n");
const llmc = "<|endoftext|>" + shakespeare.split("\n\n").join("\n\n<|endoftext|>");
out("shakespeare.llmc.tiktoken", ids(enc.encode(llmc, ["<|endoftext|>"])) + "\n");

// Every code point of planes 0-3 (all scripts, CJK extensions) and 14 (tags, variation
// selectors), 16 per line, each in contexts that expose its class (letter / number / space /
// other) to the regex: after a letter, before a digit, doubled, after a space, before "'s".
const sweep = [];
const inPlanes = (cp) => cp < 0x40000 || (cp >= 0xe0000 && cp < 0xe1000);
for (let base = 0; base < 0x110000; base += 16) {
  if (!inPlanes(base)) continue;
  let line = "";
  for (let cp = base; cp < base + 16; ++cp) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;  // surrogates are not characters
    if (cp === 0x0a) continue;                   // the line separator itself
    const c = String.fromCodePoint(cp);
    line += "a" + c + "1" + c + c + " " + c + "'s" + c + "\t";
  }
  if (line) sweep.push(line + "\n");
}
out("unicode_sweep.txt", sweep.join(""));
out("unicode_sweep.tiktoken", sweep.map((l) => ids(enc.encode_ordinary(l)) + "\n").join(""));
// Invalid UTF-8: each case (hex bytes) with the text Node's decoder makes of it (WHATWG / Unicode
// "maximal subpart" U+FFFD replacement, the same as Python's errors="replace") and its ids.
const invalidCases = [
  "ff", "61 62 63 c3", "c0 af", "ed a0 80 61", "f4 90 80 80", "e0 80 80", "f1 80 80 7a",
  "61 80 62 bf bf", "f8 88 80 80 80", "e2 82 20 e2 82 ac", "fe ff", "c3 28 41", "ef bb bf ed bf bf",
];
out("invalid_utf8.cases", invalidCases.join("\n") + "\n");
out("invalid_utf8.replaced.tiktoken", invalidCases.map((hex) => {
  const text = Buffer.from(hex.split(" ").map((h) => parseInt(h, 16))).toString("utf8");
  return ids(enc.encode_ordinary(text)) + "\n";
}).join(""));

// Long runs stress the BPE merge loop and the regex's backtracking on `\s+(?!\S)`.
const longCases = [
  " ".repeat(5000) + "x", "a".repeat(5000), "7".repeat(3001), "\n".repeat(4000) + "end",
  "! ".repeat(2000), "ab".repeat(2500), " \t".repeat(2000) + "\n", "\u00e9".repeat(3000),
  "\u4e00\u4e8c".repeat(1500), "\ud83d\ude00".repeat(1000),
];
out("long.cases", longCases.map((t) => Buffer.from(t, "utf8").toString("hex")).join("\n") + "\n");
out("long.tiktoken", longCases.map((t) => ids(enc.encode_ordinary(t)) + "\n").join(""));
enc.free();
