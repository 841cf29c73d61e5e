"""A plain PyTorch DDP script (no Lightning), unchanged by chaoslight, for ``chaoslight run``.

    chaoslight run --schedule examples/schedules/plain_straggler.txt -- \\
        torchrun --nproc-per-node 2 examples/torchrun_plain.py

torchrun starts the ranks; the script sets up its own process group, as scripts do;
``chaoslight run`` arms the schedule in each of them. Outside a Trainer a step is the
loop's iteration, counted by its optimizer steps (``docs/explanation/injection.md``).
Each rank prints its final loss, reduced across ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)  # the loss every rank logs: this step's
    print(f"rank {dist.get_rank()}: loss {float(reduced) / dist.get_world_size():.4f}")
    # Both ranks reach the end before either tears the group down: a rank whose peer has
    # already exited may wait in gloo's teardown until the job's deadline.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
