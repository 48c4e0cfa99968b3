"""leaky_training.py: tracepool's main job, shown on a small training loop in Python.

The loop makes the mistakes PyTorch users ask about: validation outputs kept in a list across
epochs, every loss kept (losses.append(loss)), and activations that are freed but stay in the
cache, which nvidia-smi still counts. It marks each epoch. Run it through tracepool,

    python -m tracepool run examples/leaky_training.py

and the report printed at its end names the lines that still hold memory, flags the ones that grew
every epoch, and tells the cache apart from the leaks (examples/leaky_training.c is the same
program written against the C API).

Where PyTorch can use a GPU and tracepool is its allocator (as `python -m tracepool run` makes
it), the model is made of CUDA tensors. Elsewhere (no GPU, no PyTorch: CI) the same loop runs on
shape-only tensors (tracepool.shape_only): objects that hold tracepool memory of a tensor's size,
allocated with tracepool.alloc and freed when the object goes away, as a tensor's storage is;
tracepool then uses its host backend, an emulated device. Like PyTorch's, their code is a library's,
so the report leads each site with this file's lines.
"""

import contextlib
import json
import sys

import tracepool
from tracepool.shape_only import ShapeOnlyTensor

EPOCHS, STEPS, VAL_BATCHES = 3, 8, 3
BATCH, INPUTS, HIDDEN, OUTPUTS = 512, 2048, 3072, 1024  # float32: weights of 24 and 12 MiB, 6 MiB activations


def tracepool_allocates_for_torch():
    """True when PyTorch's CUDA tensors come from tracepool: a new tensor shows in its statistics."""
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        return False
    before = tracepool.stats()["allocation.all.allocated"]
    probe = torch.empty(1, device="cuda")
    del probe
    return tracepool.stats()["allocation.all.allocated"] > before


if tracepool_allocates_for_torch():
    import torch

    def random_batch(*shape):
        return torch.randn(*shape, device="cuda")

    def parameter(*shape):
        return torch.randn(*shape, device="cuda").mul_(0.02).requires_grad_()

    def sgd_step(parameters, lr=1e-3):
        with torch.no_grad():
            for p in parameters:
                p.add_(p.grad, alpha=-lr)
                p.grad = None  # freed: the gradients' memory goes back to the cache

    no_grad = torch.no_grad
    where = "PyTorch CUDA tensors, tracepool as PyTorch's allocator"
else:
    random_batch = parameter = ShapeOnlyTensor

    def sgd_step(parameters):
        pass

    no_grad = contextlib.nullcontext
    backend = json.loads(tracepool.report(format="json"))["backend"]
    where = "shape-only tensors on tracepool's %s backend (no PyTorch CUDA tensors from tracepool here)" % backend


class TinyModel:
    def __init__(self):
        self.w1 = parameter(INPUTS, HIDDEN)
        self.w2 = parameter(HIDDEN, OUTPUTS)

    def __call__(self, x):
        hidden = (x @ self.w1).relu()  # activations: freed after use, so cached
        return hidden @ self.w2

    def parameters(self):
        return [self.w1, self.w2]


losses = []  # every loss of the run
val_outputs = []  # the outputs of every validation batch


def train_step(model):
    loss = model(random_batch(BATCH, INPUTS)).square().mean()  # the loss, kept by losses.append below
    loss.backward()
    sgd_step(model.parameters())
    losses.append(loss)  # the leak: keeps every loss tensor and, through its graph, the weights


def validate(model):
    with tracepool.tag("validation"), no_grad():
        for _ in range(VAL_BATCHES):
            val_outputs.append(model(random_batch(BATCH, INPUTS)))  # the leak: outputs kept past validation


def main():
    print("leaky_training: %d epochs of %d steps and %d validation batches, %s" % (EPOCHS, STEPS, VAL_BATCHES, where))
    model = TinyModel()
    for epoch in range(1, EPOCHS + 1):
        with tracepool.tag("train"):
            for _ in range(STEPS):
                train_step(model)
        validate(model)
        tracepool.mark("epoch %d" % epoch)
    del model  # the model is released; what is left at the end was forgotten

    s = tracepool.stats()
    MiB = 1 << 20
    print(
        "at the end: %.2f MiB still allocated in %d blocks, %.2f MiB reserved (nvidia-smi would show this)"
        % (s["allocated_bytes.all.current"] / MiB, s["allocation.all.current"], s["reserved_bytes.all.current"] / MiB)
    )
    if "tracepool._cli" not in sys.modules:
        print("run it as `python -m tracepool run %s` to see which lines hold that memory" % sys.argv[0])


if __name__ == "__main__":
    main()
