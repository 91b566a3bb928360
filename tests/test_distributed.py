"""Data-parallel training: two CPU processes under torchrun (gloo) take the same steps as one process."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import tfmini.train
from tfmini import distributed

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_ddp.py"
ARGS = ["--steps", "6", "--batch-size", "24", "--examples", "240", "--d-model", "32", "--layers", "1", "--lr", "1e-2"]


def _load_example():
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_ddp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_two_processes_equal_one_process_on_the_same_global_batch(tmp_path, monkeypatch):
    out = tmp_path / "ddp.pt"
    # on the CPU (gloo) on every machine: one with a single GPU has no second GPU for rank 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    monkeypatch.setattr(tfmini.train, "default_device", lambda: torch.device("cpu"))
    env.pop("WORLD_SIZE", None)
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(EXAMPLE), *ARGS, "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 process(es)" in run.stdout
    parallel = torch.load(out, weights_only=True)

    example = _load_example()
    single = example.main(ARGS).state_dict()
    start = example.build(example.parse_args(ARGS))[0].state_dict()
    assert parallel.keys() == single.keys()
    for name, p in single.items():
        if name.endswith("k_proj.bias"):
            # A key bias adds the same number to every score of a query row, which softmax ignores: its
            # gradient is 0 in exact arithmetic, so it only holds rounding noise (that Adam's step
            # normalisation enlarges), in both runs alike. It must stay far smaller than real updates.
            for state in (parallel, single):
                assert (state[name] - start[name]).abs().max() < 1e-3, name
            continue
        torch.testing.assert_close(parallel[name], p, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    # not vacuous: training moved every other weight far beyond that tolerance
    moved = min((single[k] - start[k]).abs().max().item() for k in single if not k.endswith("k_proj.bias"))
    assert moved > 1e-2, moved


def test_not_distributed_by_default():
    assert not distributed.is_distributed()
    assert (distributed.rank(), distributed.world_size()) == (0, 1)
    assert distributed.init_from_env() == (0, 1)


@pytest.mark.parametrize("B, W", [(8, 2), (7, 2), (9, 4), (3, 3)])
def test_shard_splits_rows_without_loss_or_overlap(B, W):
    x = torch.arange(B * 2).reshape(B, 2)
    y = torch.arange(B)
    parts = [distributed.shard((x, y), r, W) for r in range(W)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x)
    assert torch.equal(torch.cat([p[1] for p in parts]), y)
    assert max(p[1].numel() for p in parts) - min(p[1].numel() for p in parts) <= 1
    assert torch.equal(distributed.shard(x, 0, W), parts[0][0])


def test_shard_bad_input():
    with pytest.raises(ValueError, match=r"rank: expected 0 <= rank < world_size=2, got 2"):
        distributed.shard(torch.zeros(4, 1), 2, 2)
    with pytest.raises(ValueError, match=r"batch: expected at least world_size=4 rows to share, got 3"):
        distributed.shard(torch.zeros(3, 1), 0, 4)
    with pytest.raises(ValueError, match=r"backend: expected None, 'gloo' or 'nccl', got 'mpi'"):
        distributed.init_from_env("mpi")


def test_local_device_refuses_a_rank_without_its_gpu(monkeypatch):
    """torchrun with more processes per machine than GPUs: a clear error instead of CUDA's
    "invalid device ordinal" deep inside the first transfer."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert distributed.local_device() == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"LOCAL_RANK: expected less than the 1 GPU\(s\) of this machine, got 1"):
        distributed.local_device()

