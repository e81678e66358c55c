"""The fenced blocks of README.md and docs/*.md and their doc-test markers (docs/testing.md,
"Docs that are tested").

A marker is an HTML comment on the line just before the opening fence:

    <!-- doc-test: run; replace "--steps 8" "--steps 1"; expect "PASS" -->
    <!-- doc-test: skip (needs a GPU) -->
    <!-- doc-test: not a command (output of tools/test.sh) -->
    <!-- doc-test: output; exact "Straggler: rank 2" -->

Kinds: `run`, `skip (REASON)`, `not a command (REASON)`, `output`. Without a marker, a
```sh/```bash/```shell/```console or ```python block is `run`; any other block (no language,
```text, ...) must carry one. Clauses after `;` (arguments quoted as in sh):

    replace OLD NEW   run the block with OLD replaced by NEW (a smaller size, 2 ranks)
    drop TEXT         leave out the lines that contain TEXT
    env NAME=VALUE    set NAME in the block's environment (relative paths: the work folder)
    expect TEXT       the output must contain TEXT
    python PATH       the interpreter of a python block (default /usr/bin/python3)
    around NAME       a python fragment runs inside tests/docs/stand_ins/NAME.py, in place of
                      its line "# (the block)"
    file NAME         (output) the block shows the file NAME the command wrote, not its output
    exact TEXT        (output) TEXT must appear as written (numbers included)
"""

import glob
import os
import re
import shlex

RUN, SKIP, NOT_COMMAND, OUTPUT = "run", "skip", "not a command", "output"
SHELL_LANGS = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


class MarkerError(ValueError):
    pass


class Block(object):
    def __init__(self, path, line, lang, text, marker):
        self.path = path          # relative to the repository, e.g. docs/c10d.md
        self.line = line          # 1-based line of the opening fence
        self.lang = lang
        self.text = text
        self.marker = marker      # the comment's text, or None
        self.kind = None
        self.reason = None
        self.clauses = []         # (name, [args])
        self.error = None         # why the block is not classified (a failure)

    @property
    def id(self):
        return "%s:%d" % (self.path, self.line)

    def clause(self, name):
        return [args for n, args in self.clauses if n == name]


def parse_marker(text):
    """'skip (needs a GPU)' -> (kind, reason, clauses). The reason is everything inside the
    balanced parentheses after the kind (it may hold ';' and quotes)."""
    m = re.match(r"^(run|skip|not a command|output)\b\s*", text)
    if not m:
        raise MarkerError("unknown doc-test marker %r (run, skip (REASON), not a command "
                          "(REASON) or output)" % text)
    kind, rest, reason = m.group(1), text[m.end():], None
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                reason, rest = rest[1:i].strip() or None, rest[i + 1:].strip()
                break
        else:
            raise MarkerError("doc-test marker %r: unbalanced parentheses" % text)
    if rest and not rest.startswith(";"):
        raise MarkerError("doc-test marker %r: clauses follow a ';'" % text)
    if kind in (SKIP, NOT_COMMAND) and not reason:
        raise MarkerError("doc-test: %s needs a reason in parentheses" % kind)
    want = {"replace": 2, "drop": 1, "env": 1, "expect": 1, "python": 1, "around": 1,
            "file": 1, "exact": 1}
    clauses = []
    for part in _split_clauses(rest):
        words = shlex.split(part)
        name, args = words[0], words[1:]
        if want.get(name) != len(args):
            raise MarkerError("doc-test clause %r: unknown, or not %s argument(s)"
                              % (part, want.get(name, "?")))
        clauses.append((name, args))
    return kind, reason, clauses


def _split_clauses(rest):
    """Splits on ';' outside quotes."""
    parts, cur, quote = [], "", None
    for ch in rest:
        if quote:
            quote = None if ch == quote else quote
        elif ch == '"':
            quote = ch
        elif ch == ";":
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]




def read_blocks(repo, path):
    with open(os.path.join(repo, path)) as f:
        lines = f.read().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j]]
        prev = MARKER.match(lines[i - 1]) if i else None
        block = Block(path, i + 1, lang.lower(), "\n".join(body) + "\n",
                      prev.group(1) if prev else None)
        classify(block)
        blocks.append(block)
        i = j + 1
    return blocks


def classify(block):
    try:
        if block.marker is not None:
            block.kind, block.reason, block.clauses = parse_marker(block.marker)
        elif block.lang in SHELL_LANGS or block.lang == "python":
            block.kind = RUN
        else:
            block.error = ("%s: a ```%s block without a doc-test marker: mark it run, skip "
                           "(REASON), not a command (REASON) or output (docs/testing.md)"
                           % (block.id, block.lang))
    except MarkerError as e:
        block.error = "%s: %s" % (block.id, e)
    if block.kind == RUN and not (block.lang in SHELL_LANGS or block.lang == "python"):
        block.error = "%s: a run block must be ```sh or ```python, not ```%s" % (
            block.id, block.lang)


def doc_paths(repo):
    return ["README.md"] + sorted(os.path.relpath(p, repo)
                                  for p in glob.glob(os.path.join(repo, "docs", "*.md")))


def all_blocks(repo):
    blocks = []
    for path in doc_paths(repo):
        blocks.extend(read_blocks(repo, path))
    return blocks


def owners(blocks):
    """{output block id: the run block before it in the same file}; an output block with no
    run block before it maps to None."""
    found, last = {}, None
    for b in blocks:
        if last is not None and last.path != b.path:
            last = None
        if b.kind == RUN:
            last = b
        elif b.kind == OUTPUT:
            found[b.id] = last
    return found


def summary(blocks):
    """The lines the docs test prints at its end: counts by kind and reason."""
    runs = [b for b in blocks if b.kind == RUN]
    outputs = [b for b in blocks if b.kind == OUTPUT]
    marked = [b for b in blocks if b.kind in (SKIP, NOT_COMMAND)]
    bad = [b for b in blocks if b.error]
    lines = ["doc blocks in README.md and docs/*.md: %d; run: %d; output checked against a "
             "run: %d; marked not run: %d; unmarked or malformed: %d"
             % (len(blocks), len(runs), len(outputs), len(marked), len(bad))]
    groups = {}
    for b in marked:
        groups.setdefault((b.kind, b.reason), []).append(b.id)
    for (kind, reason), ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append("  %2d %s (%s): %s" % (len(ids), kind, reason, " ".join(ids)))
    return lines
