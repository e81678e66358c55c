"""torchvision.models' ResNets (resnet18/34/50/101/152) from examples/resnet_shapes.py."""

import os
import sys

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "..", "..", "..")))
import resnet_shapes  # noqa: E402


def _factory(name):
    def make(num_classes=1000, **unused):
        return resnet_shapes.build(name, num_classes)
    make.__name__ = name
    return make


for _name in resnet_shapes.MODELS:
    globals()[_name] = _factory(_name)
