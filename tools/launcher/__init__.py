"""horarun as a package: the wheel (tools/build_wheel.sh) ships this folder as `hora_launcher`
(beside `hora`, whose import needs numpy) and its `horarun` console script calls main(). The modules import each other by their plain
names, as tools/launcher/horarun does, so main() puts this folder first on sys.path."""

import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import horarun_lib
    return horarun_lib.main()
