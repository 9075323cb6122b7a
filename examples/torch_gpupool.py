#!/usr/bin/env python3
"""Every PyTorch CUDA tensor in a gpupool pool, with the agent serving
/metrics, and no change to the model code.

Needs PyTorch >= 2.0 (torch.cuda.memory.CUDAPluggableAllocator) with CUDA, and
libgpupool.so, which `./tools/build` makes (see README.md):

    ./tools/build
    GPUPOOL_AGENT_CONF=listen:127.0.0.1:9477 \\
        python3 examples/torch_gpupool.py build/release/libgpupool.so --wait
    curl -s localhost:9477/metrics | grep 'pool="torch"'    # from another shell

(--wait keeps the process, and so the agent, alive until Enter is pressed.
Without a path, build/release/libgpupool.so of this repository is used.)

GPUPOOL_CONF picks the strategy and tunables (e.g. strategy:round or
roundup_power2_divisions:4); see docs/torch.md.
"""
import os
import sys

MIN_TORCH = "2.0"  # the first release with CUDAPluggableAllocator

try:
    import torch
except ImportError:
    sys.exit(f"torch_gpupool.py: needs PyTorch >= {MIN_TORCH} with CUDA; torch is not installed")
if not hasattr(getattr(torch.cuda, "memory", None), "CUDAPluggableAllocator"):
    sys.exit(f"torch_gpupool.py: needs PyTorch >= {MIN_TORCH} (torch.cuda.memory."
             f"CUDAPluggableAllocator); this is torch {torch.__version__}")

here = os.path.dirname(os.path.abspath(__file__))
lib = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "build", "release",
                                                          "libgpupool.so")
if not os.path.exists(lib):
    sys.exit(f"torch_gpupool.py: {lib} does not exist: run ./tools/build first")

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
