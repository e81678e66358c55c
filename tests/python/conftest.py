import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config, items):
    """HORA_TEST_SIZES=2[,N...] keeps only the cases of jobs of those sizes ("[np2]" in the
    case's name; cases without one stay). The *_torch2 targets set it: their other sizes run
    on Debian's torch in the plain targets, and each torch 2.x job costs seconds of imports."""
    sizes = os.environ.get("HORA_TEST_SIZES")
    if not sizes:
        return
    keep = {"np" + s.strip() for s in sizes.split(",")}
    chosen, dropped = [], []
    for item in items:
        m = re.search(r"\bnp\d+\b", item.name)
        (dropped if m and m.group(0) not in keep else chosen).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = chosen
