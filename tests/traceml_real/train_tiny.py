"""A tiny CPU training job for real ``traceml run`` tests: TRAIN_STEPS steps, traced per step.

TRAIN_STEP_SLEEP seconds of sleep in each step spread the steps over the run (a step
of this model takes well under a millisecond), so their rows reach the database over
many flushes, as a real job's do, and age past a short --history-retention.
After step TRAIN_PAUSE_AT (outside any traced step) training pauses, as a long
evaluation or a checkpoint pauses it (no step rows; TraceML's system and process
snapshots go on), until the file TRAIN_RESUME_FILE exists, for TRAIN_PAUSE_S seconds at
most. Training stops early, after the step it is in, once the file TRAIN_STOP_FILE exists:
a test ends the run when it needs it ended, however slow the machine is.
"""

import os
import time

import torch
import traceml_ai as traceml

steps = int(os.environ.get("TRAIN_STEPS", "200"))
pause = float(os.environ.get("TRAIN_STEP_SLEEP", "0"))
pause_at = int(os.environ.get("TRAIN_PAUSE_AT", "-1"))
pause_s = float(os.environ.get("TRAIN_PAUSE_S", "0"))
resume_file = os.environ.get("TRAIN_RESUME_FILE", "")
stop_file = os.environ.get("TRAIN_STOP_FILE", "")


def pause_in_training() -> None:
    until = time.monotonic() + pause_s
    while time.monotonic() < until and not (resume_file and os.path.exists(resume_file)):
        time.sleep(0.05)


torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1)), batch_size=8
)
step = 0
while step < steps and not (stop_file and os.path.exists(stop_file)):
    for x, y in data:
        with traceml.trace_step(model):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            time.sleep(pause)
        step += 1
        if step == pause_at:
            pause_in_training()
        if step >= steps or (stop_file and os.path.exists(stop_file)):
            break
print("done", step)
