#!/usr/bin/env python3
"""Every PyTorch CUDA tensor in a gpupool pool, with the agent serving
/metrics, and no change to the model code.

    GPUPOOL_AGENT_CONF=listen:127.0.0.1:9477 \\
        python3 examples/torch_gpupool.py build/libgpupool.so --wait
    curl -s localhost:9477/metrics | grep 'pool="torch"'    # from another shell

(--wait keeps the process, and so the agent, alive until Enter is pressed.)

GPUPOOL_CONF picks the strategy and tunables (e.g. strategy:round or
roundup_power2_divisions:4); see docs/torch.md.
"""
import sys

import torch

lib = sys.argv[1] if len(sys.argv) > 1 else "libgpupool.so"

# Before the first CUDA allocation of the process: the allocator cannot be
# changed once PyTorch has allocated with its own.
allocator = torch.cuda.memory.CUDAPluggableAllocator(lib, "gpupool_torch_malloc",
                                                     "gpupool_torch_free")
torch.cuda.memory.change_current_allocator(allocator)

model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(100):
    x = torch.randn(64, 1024, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"loss after 100 steps: {loss.item():.4f}")
if len(sys.argv) > 2 and sys.argv[2] == "--wait":
    input("the agent serves /metrics until you press Enter ")
