"""A small training program with one of the memory bugs the seeds describe (../shared/seeds), or none.
It never imports tracepool and makes no marks: tests/gpu/unmarked_check.py runs it unchanged under
`python -m tracepool run -o REPORT.json unmarked_train.py --bug BUG` and reads the report.

    --bug none         a clean loop: validation under no_grad, loss.item()
    --bug val_outputs  validation outputs kept in a global list
    --bug losses       losses.append(loss) without .item()
    --bug graph        validation losses kept without no_grad: their autograd graphs hold activations
    --bug closure      a forward hook whose closure keeps every output of a layer
    --bug cache        a memo dict that never evicts

Each bug's allocating line ends in a marker comment "# <BUG>" that the check looks for.
"""
import argparse
import contextlib

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--bug", default="none", choices=["none", "val_outputs", "losses", "graph", "closure", "cache"])
parser.add_argument("--epochs", type=int, default=12)
args = parser.parse_args()

torch.manual_seed(0)
device = torch.device("cuda")
inputs, labels = torch.randn(16384, 512), torch.randint(0, 10, (16384,))
train_loader = DataLoader(TensorDataset(inputs, labels), batch_size=64, shuffle=True)
val_loader = DataLoader(TensorDataset(inputs[:2048], labels[:2048]), batch_size=256)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()

losses = []
val_outputs = []
val_losses = []
cache = {}


def make_hook():
    seen = []

    def keep(module, module_inputs, output):
        seen.append(output.detach())

    return keep


if args.bug == "closure":
    model[2].register_forward_hook(make_hook())


def train_step(x, y, epoch, i):
    if args.bug == "losses":
        loss = criterion(model(x), y)  # <losses>
    elif args.bug == "closure":
        loss = criterion(model(x), y)  # <closure>
    else:
        loss = criterion(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if args.bug == "losses":
        losses.append(loss)
    else:
        losses.append(loss.item())
    if args.bug == "cache" and i % 4 == 0:
        cache[(epoch, i)] = model[0](x).detach()  # <cache>


def validate():
    model.eval()
    correct = 0
    with torch.no_grad() if args.bug != "graph" else contextlib.nullcontext():
        for x, y in val_loader:
            x, y = x.to(device), y.to(device)
            if args.bug == "val_outputs":
                val_outputs.append(model(x))  # <val_outputs>
            elif args.bug == "graph":
                val_losses.append(criterion(model(x), y))  # <graph>
            else:
                correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct


for epoch in range(args.epochs):
    for i, (x, y) in enumerate(train_loader):
        train_step(x.to(device), y.to(device), epoch, i)
    validate()
torch.cuda.synchronize()
print("trained %d epochs, last loss %.3f" % (args.epochs, float(losses[-1])))
