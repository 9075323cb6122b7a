#!/usr/bin/env python3
"""Writes a synthetic allocation trace (bench/trace_file.h format) shaped like
the training loop of a small transformer with varying sequence lengths:
parameters and optimizer state live for the whole run; each step allocates
the activations of every layer (sized by that step's sequence length), frees
them in reverse order during the backward pass while gradients come and go,
and copies the next batch on a second stream. For testing bench_replay where
no real trace exists; real traces come from tests/gpu/torch_train.py.

    make_trace.py [--steps N] [--layers N] [--seed N] --out FILE
"""
import argparse
import random


class Trace:
    def __init__(self, out):
        self.out = out
        self.next_id = 1
        self.size = {}

    def alloc(self, size, stream=0):
        i = self.next_id
        self.next_id += 1
        self.size[i] = size
        self.out.write(f"a {i:#x} {size} {stream:#x}\n")
        return i

    def free(self, i):
        del self.size[i]
        self.out.write(f"f {i:#x}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    copy_stream = 0x5000
    h, f4 = a.hidden, 4  # fp32
    with open(a.out, "w") as out:
        t = Trace(out)
        out.write(f"# synthetic transformer trace: steps {a.steps}, layers {a.layers}, seed {a.seed}\n")
        param_sizes = [a.vocab * h * f4]
        for _ in range(a.layers):
            param_sizes += [3 * h * h * f4, 3 * h * f4, h * h * f4, h * f4,
                            4 * h * h * f4, 4 * h * f4, 4 * h * h * f4, h * f4, h * f4, h * f4]
        params = [t.alloc(s) for s in param_sizes]
        # Adam state: two tensors per parameter.
        state = [t.alloc(s) for s in param_sizes for _ in range(2)]
        batch_next = t.alloc(a.batch * 512 * 8, copy_stream)
        for _ in range(a.steps):
            seq = rng.choice([64, 96, 128, 192, 256, 384, 512])
            tokens = a.batch * seq
            batch, batch_next = batch_next, t.alloc(a.batch * rng.choice([64, 128, 256, 512]) * 8,
                                                    copy_stream)
            saved = [t.alloc(tokens * h * f4)]  # embeddings
            for _ in range(a.layers):
                saved.append(t.alloc(tokens * 3 * h * f4))           # qkv
                saved.append(t.alloc(a.batch * 8 * seq * seq * f4))  # attention scores
                saved.append(t.alloc(tokens * h * f4))               # attention out
                tmp = t.alloc(tokens * h * f4)                       # residual temp
                saved.append(t.alloc(tokens * 4 * h * f4))           # mlp hidden
                saved.append(t.alloc(tokens * h * f4))               # mlp out
                t.free(tmp)
            logits = t.alloc(tokens * a.vocab * f4)
            loss = t.alloc(512)
            grad_logits = t.alloc(tokens * a.vocab * f4)
            t.free(logits)
            grads = []
            for s in reversed(saved):
                g = t.alloc(t.size[s])  # gradient of the same shape, briefly
                t.free(s)
                t.free(g)
            for s in param_sizes:
                grads.append(t.alloc(s))
            t.free(grad_logits)
            t.free(loss)
            for g in grads:  # optimizer step, then zero_grad(set_to_none)
                tmp = t.alloc(512 + rng.randrange(0, 4) * 512)
                t.free(tmp)
                t.free(g)
            t.free(batch)
        t.free(batch_next)
        for i in state + params:
            t.free(i)


if __name__ == "__main__":
    main()
