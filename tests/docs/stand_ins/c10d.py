"""docs/c10d.md's first lines (the block replaces the line below) with what they leave to the
user (torch and the model), then one DDP step."""

import torch

model = torch.nn.Linear(8, 2)
# (the block)
model(torch.randn(4, 8)).sum().backward()
grad = model.module.weight.grad
dist.all_reduce(grad)
print("DDP on hora: rank %d of %d, gradient synchronized" % (dist.get_rank(),
                                                            dist.get_world_size()))
dist.destroy_process_group()
