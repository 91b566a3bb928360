"""tfmini: attention and Transformer building blocks, derived in the tfmini course and tested against PyTorch.

Modules, one concept each: :mod:`~tfmini.attention`, :mod:`~tfmini.masks`, :mod:`~tfmini.positional`,
:mod:`~tfmini.layers`, :mod:`~tfmini.rnn`, :mod:`~tfmini.model`, :mod:`~tfmini.decoding`,
:mod:`~tfmini.data`, :mod:`~tfmini.tokenizer`, :mod:`~tfmini.huggingface`, :mod:`~tfmini.pretraining`, :mod:`~tfmini.schedules`, :mod:`~tfmini.losses`, :mod:`~tfmini.train`,
:mod:`~tfmini.checkpoint`, :mod:`~tfmini.evaluation`, :mod:`~tfmini.distributed`, :mod:`~tfmini.plot`,
:mod:`~tfmini.weights` (real checkpoints from pinned pip packages, offline).
"""
from .attention import (AdditiveScore, BahdanauAttention, BilinearScore, DotScore, MultiHeadAttention,
                        masked_softmax, scaled_dot_product_attention)
from .data import (Batches, Vocab, copy_task, encode_pairs, load_parallel_tsv, number_words, pad_sequences,
                   reverse_task, sort_task, spelled_numbers, spelled_numbers_alignment)
from .decoding import beam_search, generate, greedy_decode, sample, select_batch
from .huggingface import from_huggingface
from .layers import DecoderLayer, EncoderLayer, FeedForward, RMSNorm, SwiGLU
from .masks import attention_mask, causal_mask, mask_from_ids, mask_from_lengths, pad_mask, padding_mask
from .model import (Decoder, DecoderOnlyLM, Encoder, EncoderOnlyLM, EncoderOnlyModel, KVCache, TokenEmbedding,
                    Transformer, TransformerConfig)
from .positional import (LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding, apply_rope,
                         rope_cos_sin, rotate_half, sinusoidal_positional_encoding)
from .pretraining import (IGNORE_INDEX, PYTHON_SOURCE_MODULES, lm_windows, mask_tokens, masked_lm_loss,
                          python_source_text, train_val_split)
from .tokenizer import GPT2_SPLIT_PATTERN, BPETokenizer
from .rnn import AttentionSeq2SeqRNN, LSTMCell, Seq2SeqRNN, reverse_padded
from .train import History, default_device, fit, param_groups, set_seed
from .checkpoint import fit_or_load
from .evaluation import evaluate, evaluate_by_length, sequence_accuracy, token_accuracy
from .losses import batch_loss
from .schedules import transformer_lr, warmup_schedule

from . import distributed, notebook, plot, weights

__version__ = "0.3.0"
