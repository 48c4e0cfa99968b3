"""The workloads the GPU benchmarks time (capture_bench.py, and segments_bench.py through it; torch_check.py
times resnet50_step too). Each workload function sets up on the GPU and returns an object whose turn()
runs a short stretch and returns its figures (Note [Turns] in capture_bench.py).

  resnet50   training step: ResNet-50, batch 64, channels_last, bf16 autocast, AdamW, a fresh batch
             each step (copied from pinned host memory, as a DataLoader's batch is)
  gpt2       training step: GPT-2 small, batch 8 x 1024, bf16 autocast, AdamW, fresh tokens each step
  varlen     the GPT-2 step with a batch size and sequence length drawn afresh each step (2-16 sequences
             of 64-1024 tokens, at most 12288 tokens), the same draws in every process: the shapes of
             a padding-free loader, which fragment a cache of fixed segments
  resnet18   inference at batch 1 under inference_mode, a fresh input each iteration
  empty      torch.empty(1 MiB) alloc+free pairs through Python
"""
import random
import time


def pinned_batches(torch, make, count=4):
    """`count` host tensors in pinned memory, copied to the GPU in turn: a fresh input every step."""
    return [make(i).pin_memory() for i in range(count)]


def resnet50_step(torch):
    """step(i) of the ResNet-50 training loop (torch_check.py times it too)."""
    import torchvision
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialised on the GPU: seconds less per process than on the CPU
        model = torchvision.models.resnet50(weights=None).to(memory_format=torch.channels_last).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    images = pinned_batches(torch, lambda i: torch.randn(64, 3, 224, 224, generator=gen))
    labels = pinned_batches(torch, lambda i: torch.randint(0, 1000, (64,), generator=gen))

    def step(i):
        x = images[i % 4].to("cuda", non_blocking=True).to(memory_format=torch.channels_last)
        y = labels[i % 4].to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class Steps:
    """A training loop: a turn times `per_turn` steps, each between synchronisations (ms)."""

    calls = 1  # steps per figure

    def __init__(self, torch, step, warmup, per_turn):
        self.torch, self.step, self.per_turn, self.i = torch, step, per_turn, 0
        for _ in range(warmup):
            self.one()

    def one(self):
        self.step(self.i)
        self.i += 1

    def turn(self):
        sync, times = self.torch.cuda.synchronize, []
        for _ in range(self.per_turn):
            sync()
            start = time.perf_counter()
            self.one()
            sync()
            times.append((time.perf_counter() - start) * 1e3)
        return times


class Blocks:
    """A loop timed in blocks: a turn times `blocks` blocks of `size` calls of one(), each block
    ending in a synchronisation; the figure is per call (ms, or ns for the empty loop)."""

    def __init__(self, torch, one, warmup, size, blocks, scale):
        self.torch, self.one, self.calls, self.blocks, self.scale = torch, one, size, blocks, scale
        for _ in range(warmup):
            one()
        torch.cuda.synchronize()

    def turn(self):
        times = []
        for _ in range(self.blocks):
            start = time.perf_counter()
            for _ in range(self.calls):
                self.one()
            self.torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * self.scale / self.calls)
        return times


def resnet50(torch):
    return Steps(torch, resnet50_step(torch), 5, 11)


def gpt2(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT2LMHeadModel(GPT2Config()).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(2)
    tokens = pinned_batches(torch, lambda i: torch.randint(0, model.config.vocab_size, (8, 1024), generator=gen))

    def step(i):
        ids = tokens[i % 4].to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return Steps(torch, step, 3, 6)


def resnet18(torch):
    """Small-batch inference, where the CPU's per-op cost (allocation included) sets the pace."""
    import torchvision
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = torchvision.models.resnet18(weights=None).eval()
    inputs = pinned_batches(torch, lambda i: torch.randn(1, 3, 224, 224))
    state = {"i": 0}

    def one():
        with torch.inference_mode():
            model(inputs[state["i"] % 4].to("cuda", non_blocking=True))
        state["i"] += 1
    return Blocks(torch, one, 50, 25, 9, 1e3)


def empty(torch):
    n = 1 << 20

    def one():
        x = torch.empty(n, device="cuda")
        del x
    return Blocks(torch, one, 5000, 4000, 5, 1e9)


def varlen(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT2LMHeadModel(GPT2Config()).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = model.config.vocab_size

    def step(i):
        draw = random.Random(i)  # step i has the same shape in every process
        length = draw.randrange(64, 1025, 32)
        batch = max(1, min(draw.randrange(2, 17), 12288 // length))
        gen = torch.Generator().manual_seed(i)
        ids = torch.randint(0, vocab, (batch, length), generator=gen).pin_memory().to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return Steps(torch, step, 3, 8)
