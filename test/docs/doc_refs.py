#!/usr/bin/env python3
"""Checks that the docs name only what exists (run by test/docs/doc_refs_test.sh).

usage: doc_refs.py TRAINER_HELP [--other PROGRAM=HELP]... [DOC...]
       (default DOCs: README.md and docs/*.md; HELP files hold a program's --help)

Run from the repository root. Two kinds of reference, each stale one reported
as `DOC:LINE: ...` with what is missing:
  - repository paths: in code spans and code blocks, a word that starts with
    one of the tree's top-level source folders (`train/options.cpp`,
    `scripts/finetune.sh`, `backend/cpu/`; globs and {a,b} alternatives must
    each match), a word that leaves docs/ (`../x`), and every relative link
    target must exist in the tree;
  - trainer flags: every `--flag` after the program's name on a code-block line
    or in a code span that runs train_gpt2cu, and every `--flag` in a code span
    of docs/cli.md, must be an option of TRAINER_HELP; in a paragraph of cli.md
    that names PROGRAM, PROGRAM's options count too.
Placeholders (NAME, ..., XXXXXX), generated places (build/, data/, out/) and
llm.c's own files (a span right after "llm.c's") are not paths of the tree.
"""
import glob
import os
import re
import sys

# Top-level folders whose files are in the repository (not generated), and
# kernels/, a stale name for backend/cuda/: any path there is reported.
SOURCE_DIRS = ("backend", "dataloader", "dataprep", "dev", "distributed", "docs", "emu", "model",
               "scripts", "test", "tokenizer", "train", "util", ".ci", "kernels")
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w./+*{},-]*)" % "|".join(re.escape(d) for d in SOURCE_DIRS))
UP_RE = re.compile(r"(?<![\w./-])(?:\.\./)+[\w./+-]+")
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
SPAN_RE = re.compile(r"`([^`]+)`")
# A span right after "llm.c's" names a file of llm.c's repository, not of ours.
LLMC_SPAN_RE = re.compile(r"llm\.c's\s+`[^`]+`", re.S)
FLAG_RE = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
# A placeholder, not a path: elisions, names in capitals. Globs and {a,b}
# alternatives are paths: each must match.
PLACEHOLDER_RE = re.compile(r"[<>…]|\.\.\.|XXXX|/[A-Z][A-Z_]+(?:[/.]|$)")
# Words of the docs' prose about options in general, not options.
GENERIC_FLAGS = {"--name"}
TRAINER_RE = re.compile(r"train_gpt2cu(?:_emu)?\b")


def read_help(path):
    """The options a --help text lists: the `--name` of each option line."""
    flags = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s+(?:-\w, )?(--[a-z0-9-]+)", line)
            if m:
                flags.add(m.group(1))
    if not flags:
        sys.exit("%s: no options: not a --help text" % path)
    return flags


def doc_lines(path):
    """(line number, text, in a code block) for each line of a markdown file."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            text = line.rstrip("\n")
            m = re.match(r"\s*(```+|~~~+)", text)
            if m:
                fence = None if fence and m.group(1).startswith(fence) else (fence or m.group(1))
                continue
            yield n, text, fence is not None


def expand_braces(p):
    """a.{h,cpp} -> [a.h, a.cpp] (one level, as the docs write them)."""
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return [q for alt in m.group(1).split(",") for q in expand_braces(p[:m.start()] + alt + p[m.end():])]


def path_exists(p):
    return all(glob.glob(q) for q in expand_braces(p))


def check_paths(doc, n, text, in_block, problems, counts):
    """Each path the line names, as written and as resolved from the repository root."""
    here = os.path.dirname(doc)
    pieces = [text] if in_block else SPAN_RE.findall(LLMC_SPAN_RE.sub("", text))
    candidates = [(m.group(1), m.group(1)) for piece in pieces for m in PATH_RE.finditer(piece)]
    # A word that climbs out of docs/ (`../shared/x.h`, in a span or not) names a file outside
    # the repository unless it resolves inside it.
    if not in_block:
        candidates += [(m.group(0), os.path.normpath(os.path.join(here, m.group(0))))
                       for m in UP_RE.finditer(text) if "](" + m.group(0) not in text]
    for target in LINK_RE.findall(text):
        target = target.split("#", 1)[0]
        if not target or re.match(r"[a-z]+:", target):
            continue  # an anchor in the same page, or a URL
        candidates.append((target, os.path.normpath(os.path.join(here, target))))
    for written, p in candidates:
        p = p.rstrip(".,;:)")
        if PLACEHOLDER_RE.search(p) or not p:
            continue
        counts["paths"] += 1
        if p.startswith("../") or not path_exists(p):
            problems.append("%s:%d: no such path in the tree: %s" % (doc, n, written.rstrip(".,;:)")))


def trainer_commands(text, in_block, continued):
    """The parts of a line that are a train_gpt2cu command line (its arguments)."""
    pieces = [text] if in_block else SPAN_RE.findall(text)
    out = []
    for piece in pieces:
        m = TRAINER_RE.search(piece)
        if m:
            out.append(piece[m.end():])
        elif in_block and continued:
            out.append(piece)
    return out


def paragraphs(lines):
    """Each prose line's paragraph text (blank lines, code and list items end one)."""
    out, current = {}, []

    def close():
        joined = " ".join(text for _, text in current)
        out.update((n, joined) for n, _ in current)
        current.clear()

    for n, text, in_block in lines:
        if in_block or not text.strip() or re.match(r"\s*[-*] ", text):
            close()
        if text.strip() and not in_block:
            current.append((n, text))
    close()
    return out


def check_flags(doc, lines, flags, other_flags, problems, counts):
    is_cli = os.path.basename(doc) == "cli.md"
    paragraph = paragraphs(lines) if is_cli else {}
    continued = False  # the block's previous line ran the trainer and ended in a backslash
    for n, text, in_block in lines:
        allowed = flags
        if in_block:
            code = text.split(" #", 1)[0]  # a shell comment is prose
            args = trainer_commands(code, True, continued)
            continued = bool(args) and code.rstrip().endswith("\\")
        else:
            continued = False
            args = trainer_commands(text, False, False)
            if is_cli:
                args += [span for span in SPAN_RE.findall(text) if not TRAINER_RE.search(span)]
                # cli.md's paragraph on another of our programs may name its options.
                for prog, prog_flags in other_flags.items():
                    if prog in paragraph.get(n, ""):
                        allowed = allowed | prog_flags
        for a in args:
            for flag in FLAG_RE.findall(a):
                counts["flags"] += 1
                if flag not in allowed and flag not in GENERIC_FLAGS:
                    problems.append("%s:%d: %s is not an option of train_gpt2cu --help" % (doc, n, flag))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    flags = read_help(args.pop(0))
    other_flags = {}
    while args and args[0] == "--other":
        name, _, path = args[1].partition("=")
        other_flags[name] = read_help(path)
        args = args[2:]
    docs = args or ["README.md"] + sorted(glob.glob("docs/*.md"))
    problems, counts = [], {"paths": 0, "flags": 0}
    for doc in docs:
        lines = list(doc_lines(doc))
        for n, text, in_block in lines:
            check_paths(doc, n, text, in_block, problems, counts)
        check_flags(doc, lines, flags, other_flags, problems, counts)
    problems = list(dict.fromkeys(problems))
    for p in problems:
        print("FAIL " + p)
    print("%d docs: %d path and %d flag references checked against the tree and %d options of --help; "
          "%d stale" % (len(docs), counts["paths"], counts["flags"], len(flags), len(problems)))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
