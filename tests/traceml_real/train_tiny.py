"""A tiny CPU training job for real ``traceml run`` tests: TRAIN_STEPS steps, traced per step.

TRAIN_STEP_SLEEP seconds of sleep in each step spread the steps over the run (a step
of this model takes well under a millisecond), so their rows reach the database over
many flushes, as a real job's do, and age past a short --history-retention.
"""

import os
import time

import torch
import traceml_ai as traceml

steps = int(os.environ.get("TRAIN_STEPS", "200"))
pause = float(os.environ.get("TRAIN_STEP_SLEEP", "0"))
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1)), batch_size=8
)
step = 0
while step < steps:
    for x, y in data:
        with traceml.trace_step(model):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            time.sleep(pause)
        step += 1
        if step >= steps:
            break
print("done", step)
