"""Ends the docs tests' output with the doc-block counts (test_doc_blocks.py): how many blocks
run, how many are output checked against a run, and those marked not run, by reason."""

import os

import doc_blocks


def pytest_terminal_summary(terminalreporter):
    if not any("test_doc_blocks" in str(a) for a in terminalreporter.config.args):
        return
    for line in doc_blocks.summary(doc_blocks.all_blocks(os.getcwd())):
        terminalreporter.write_line(line)
