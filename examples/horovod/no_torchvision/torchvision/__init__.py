"""Stands in for torchvision where it is not installed, for Horovod's unchanged
pytorch_synthetic_benchmark.py (tools/gpu_check.sh puts this folder on PYTHONPATH only then,
and says so): only `torchvision.models.resnet18` ... `resnet152`, with torchvision's layer
shapes, built by examples/resnet_shapes.py."""
