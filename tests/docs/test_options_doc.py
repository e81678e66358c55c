"""docs/options.md ("All options", as the README calls it) against the code: every variable
the runtime reads (the kEnv* names of runtime/options.h) has its row there, and every HORA_
name docs/options.md and README.md tell a user to set is one the runtime knows (options.h, or
runtime/env_aliases.cc's list of the names the launcher, hora.torch and the tools read), so a
name cannot be documented and warned about as unknown at once ("HORA_NCCL_LIBRARY is not a
Hora variable")."""

import os
import re

REPO = os.getcwd()
# Names the docs write on purpose without being variables: a misspelling shown as an example.
NOT_VARIABLES = {"HORA_FUSION_TRESHOLD"}
# A HORA_ name, not a prefix written with a star or an ellipsis (HORA_CROSS_*).
NAME = re.compile(r"\b(HORA_[A-Z0-9_]*[A-Z0-9])\b(?![_*]|\.\.\.)")


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def runtime_options():
    return set(re.findall(r'constexpr const char kEnv\w+\[\] = "(HORA_\w+)"',
                          read("runtime/options.h")))


def known_names():
    text = read("runtime/env_aliases.cc")
    block = text[text.index("constexpr const char* kKnown[]"):]
    return set(re.findall(r'"(HORA_\w+)"', block[:block.index("};")])) | runtime_options()


def test_every_runtime_option_has_its_row():
    doc = read("docs/options.md")
    rows = set()
    for line in doc.splitlines():
        if line.startswith("| `HORA_"):
            rows |= set(NAME.findall(line.split("|")[1]))
    options = runtime_options()
    assert len(options) >= 30, options  # the parse found them
    assert not options - rows, "options without a row in docs/options.md: %s" % sorted(
        options - rows)


def test_every_documented_name_is_known():
    known = known_names()
    for path in ("docs/options.md", "README.md"):
        named = set(NAME.findall(read(path))) - NOT_VARIABLES
        assert named, path
        assert not named - known, "%s names variables the runtime does not know: %s" % (
            path, sorted(named - known))
