"""Train chapter 9's Transformer on the spelled-numbers task, alone or data-parallel with torchrun.

    python examples/train_ddp.py --steps 300                                  # one process
    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --steps 300  # 2 processes, one machine
    torchrun --nnodes=2 --node_rank=R --nproc_per_node=8 --rdzv_backend=c10d \\
             --rdzv_endpoint=HOST:29500 examples/train_ddp.py --steps 300    # 2 machines x 8 GPUs

The global batch (``--batch-size``) is shared out among the processes, so every run with the same
arguments takes the same optimisation steps, whatever the number of processes; more processes only
make each step faster. On GPUs each process uses the GPU of its ``LOCAL_RANK`` and the ``nccl``
backend; on CPUs, ``gloo``. Rank 0 writes the trained weights to ``--out``.
"""
from __future__ import annotations

import argparse

import torch

import tfmini


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch, shared by all processes")
    parser.add_argument("--examples", type=int, default=20000)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--out", default=None, help="where rank 0 saves the state dict")
    return parser.parse_args(argv)


def build(args: argparse.Namespace):
    """The data and the untrained model: the same in every process (fixed seeds)."""
    pairs = tfmini.spelled_numbers(args.examples, min_numbers=1, max_numbers=12, seed=0)
    src_vocab = tfmini.Vocab.build(s for s, _ in pairs)
    tgt_vocab = tfmini.Vocab.build(t for _, t in pairs)
    data = tfmini.Batches(tfmini.encode_pairs(pairs, src_vocab, tgt_vocab), batch_size=args.batch_size, seed=0)
    tfmini.set_seed(0)
    config = tfmini.TransformerConfig(len(tgt_vocab), src_vocab_size=len(src_vocab), d_model=args.d_model,
                                      num_heads=4, num_encoder_layers=args.layers,
                                      num_decoder_layers=args.layers, dropout=0.0, max_len=128,
                                      norm_first=True)
    return tfmini.Transformer(config), data


def main(argv=None) -> tfmini.Transformer:
    args = parse_args(argv)
    rank, world = tfmini.distributed.init_from_env()
    model, data = build(args)
    history = tfmini.fit(model, data, steps=args.steps, lr=args.lr, warmup_steps=min(100, args.steps // 2),
                         progress=rank == 0)
    if rank == 0:
        print(f"{world} process(es), global batch {args.batch_size}: {history.step[-1]} steps, "
              f"loss {history.loss[-1]:.4f}, {history.seconds:.1f} s")
        if args.out:
            torch.save({k: v.cpu() for k, v in model.state_dict().items()}, args.out)
    if tfmini.distributed.is_distributed():
        torch.distributed.destroy_process_group()
    return model


if __name__ == "__main__":
    main()
