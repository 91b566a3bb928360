"""Data: deterministic synthetic tasks, a vocabulary, padded batches and a tab-separated text loader.

Every task is generated from a seed, offline. Examples are pairs of token lists
``(source_tokens, target_tokens)``; a :class:`Vocab` turns tokens into ids and
:class:`Batches` turns id sequences into right-padded ``LongTensor`` batches.

The running task of the course, :func:`spelled_numbers`, reads numbers spelled out in
units-before-tens order ("four and twenty", as German says *vierundzwanzig*) and writes their
digits: the tens digit comes from the *last* word of a number and the units digit from the
first, so the alignment between source and target is not a diagonal.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "Vocab", "copy_task", "reverse_task", "sort_task", "number_words", "spelled_numbers", "spelled_numbers_alignment",
    "pad_sequences", "encode_pairs", "Batches", "load_parallel_tsv",
]

Pair = Tuple[List[str], List[str]]

_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


class Vocab:
    """Token <-> id mapping with the special tokens ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3.

    Args:
        tokens: the ordinary tokens (duplicates are ignored; order is sorted for determinism).
    """

    specials = ("<pad>", "<bos>", "<eos>", "<unk>")
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str]):
        ordinary = sorted(set(tokens) - set(self.specials))
        self.itos: List[str] = list(self.specials) + ordinary
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, sequences: Iterable[Sequence[str]]) -> "Vocab":
        """A vocabulary of every token that occurs in ``sequences``."""
        return cls(t for seq in sequences for t in seq)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str], bos: bool = False, eos: bool = False) -> List[int]:
        """Token ids, unknown tokens mapped to ``<unk>``; optionally wrapped in BOS/EOS."""
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def decode(self, ids: Union[Sequence[int], torch.Tensor]) -> List[str]:
        """Tokens up to the first EOS, without padding and BOS."""
        out = []
        for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            if not 0 <= i < len(self.itos):
                raise ValueError(f"ids: expected values in [0, {len(self.itos) - 1}], got {i}")
            out.append(self.itos[i])
        return out


def _check_lengths(min_len: int, max_len: int) -> None:
    if not 1 <= min_len <= max_len:
        raise ValueError(f"min_len, max_len: expected 1 <= min_len <= max_len, got {min_len}, {max_len}")


def _random_sequences(n: int, min_len: int, max_len: int, num_symbols: int, seed: int) -> List[List[str]]:
    _check_lengths(min_len, max_len)
    rng = random.Random(seed)
    return [[str(rng.randrange(num_symbols)) for _ in range(rng.randint(min_len, max_len))] for _ in range(n)]


def copy_task(n: int, min_len: int = 3, max_len: int = 10, num_symbols: int = 10, seed: int = 0) -> List[Pair]:
    """Target = source; symbols are ``"0" .. str(num_symbols - 1)``.

    Args:
        n: number of examples.
        min_len, max_len: the source length is uniform in ``[min_len, max_len]``.
        num_symbols: size of the alphabet.
        seed: the examples are a function of the arguments and this seed.

    Returns:
        ``n`` pairs ``(source_tokens, target_tokens)`` of string tokens.
    """
    return [(s, list(s)) for s in _random_sequences(n, min_len, max_len, num_symbols, seed)]


def reverse_task(n: int, min_len: int = 3, max_len: int = 10, num_symbols: int = 10, seed: int = 0) -> List[Pair]:
    """Target = source reversed; symbols are ``"0" .. str(num_symbols - 1)``.

    Args:
        n: number of examples.
        min_len, max_len: the source length is uniform in ``[min_len, max_len]``.
        num_symbols: size of the alphabet.
        seed: the examples are a function of the arguments and this seed.

    Returns:
        ``n`` pairs ``(source_tokens, target_tokens)`` of string tokens.
    """
    return [(s, s[::-1]) for s in _random_sequences(n, min_len, max_len, num_symbols, seed)]


def sort_task(n: int, min_len: int = 3, max_len: int = 10, num_symbols: int = 10, seed: int = 0) -> List[Pair]:
    """Target = source sorted by symbol value; symbols are ``"0" .. str(num_symbols - 1)``.

    Args:
        n: number of examples.
        min_len, max_len: the source length is uniform in ``[min_len, max_len]``.
        num_symbols: size of the alphabet.
        seed: the examples are a function of the arguments and this seed.

    Returns:
        ``n`` pairs ``(source_tokens, target_tokens)`` of string tokens.
    """
    return [(s, sorted(s, key=int)) for s in _random_sequences(n, min_len, max_len, num_symbols, seed)]


def number_words(n: int) -> List[str]:
    """0..99 spelled units first: 7 -> ["seven"], 13 -> ["thirteen"], 40 -> ["forty"], 24 -> ["four", "and", "twenty"].

    Args:
        n: an integer in ``[0, 99]``.

    Returns:
        the words, one to three of them.
    """
    if not 0 <= n <= 99:
        raise ValueError(f"n: expected an integer in [0, 99], got {n}")
    if n < 10:
        return [_UNITS[n]]
    if n < 20:
        return [_TEENS[n - 10]]
    if n % 10 == 0:
        return [_TENS[n // 10]]
    return [_UNITS[n % 10], "and", _TENS[n // 10]]


def spelled_numbers(n: int, min_numbers: int = 1, max_numbers: int = 8, seed: int = 0) -> List[Pair]:
    """The running task: a list of numbers 0..99 spelled units first, to their digits.

    ``["four", "and", "twenty", ",", "seven"]`` -> ``["2", "4", ",", "7"]``. The number of numbers
    per example is uniform in ``[min_numbers, max_numbers]``; each adds 1 to 3 words and a comma to
    the source, so ``max_numbers=12`` gives sources of up to 47 tokens.

    Args:
        n: number of examples.
        min_numbers, max_numbers: bounds of the number of numbers per example.
        seed: the examples are a function of the arguments and this seed.

    Returns:
        ``n`` pairs ``(source_words, target_digits)``.
    """
    _check_lengths(min_numbers, max_numbers)
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        numbers = [rng.randrange(100) for _ in range(rng.randint(min_numbers, max_numbers))]
        src, tgt = [], []
        for j, x in enumerate(numbers):
            if j:
                src.append(",")
                tgt.append(",")
            src += number_words(x)
            tgt += list(str(x))
        pairs.append((src, tgt))
    return pairs


def spelled_numbers_alignment(src: Sequence[str]) -> List[int]:
    """The reference alignment of a :func:`spelled_numbers` example: for each target token, the index of
    the source token it is read from.

    A tens digit comes from the tens word ("twenty" in "four and twenty"), a units digit from the units
    word ("four"), both digits of 10-19 and of 20, 30, ... from their single word, a comma from the comma.

    Args:
        src: the source words of one example.

    Returns:
        one source index per target token, in target order.
    """
    number_of = {w: i for i, w in enumerate(_UNITS)}
    number_of.update({w: 10 + i for i, w in enumerate(_TEENS)})
    number_of.update({w: 10 * i for i, w in enumerate(_TENS) if w})
    alignment, start = [], 0
    for end in [j for j, w in enumerate(src) if w == ","] + [len(src)]:
        words = list(src[start:end])
        if len(words) == 1 and words[0] in number_of:
            n = number_of[words[0]]
            alignment += [start] * len(str(n))
        elif len(words) == 3 and words[1] == "and" and words[0] in _UNITS and words[2] in _TENS:
            alignment += [start + 2, start]  # tens digit from the tens word, units digit from the units word
        else:
            raise ValueError(f"src: expected a spelled_numbers source, got the group {words!r} at position {start}")
        if end < len(src):
            alignment.append(end)  # the comma
        start = end + 1
    return alignment


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0) -> torch.Tensor:
    """Right-pad id lists into a ``LongTensor (B, T_max)``.

    Args:
        seqs: ``B`` lists of token ids, of any lengths.
        pad_id: the id that fills the positions after each sequence.

    Returns:
        the padded ids.

    Shape:
        ``B`` sequences -> ``(B, T_max)``, ``T_max`` the longest length.
    """
    if len(seqs) == 0:
        raise ValueError("seqs: expected at least one sequence, got an empty list")
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def encode_pairs(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab) -> List[Tuple[List[int], List[int]]]:
    """Token pairs -> id pairs; the target is wrapped in BOS ... EOS (for teacher forcing).

    Args:
        pairs: ``(source_tokens, target_tokens)`` pairs.
        src_vocab, tgt_vocab: the vocabularies of the two sides.

    Returns:
        ``(source_ids, target_ids)`` pairs, ready for :class:`Batches`.
    """
    return [(src_vocab.encode(s), tgt_vocab.encode(t, bos=True, eos=True)) for s, t in pairs]


class Batches:
    """Re-iterable, right-padded mini-batches; reshuffled every pass, deterministically from ``seed``.

    Args:
        examples: id pairs ``(src_ids, tgt_ids)`` (yields ``(src (B, S), tgt (B, T))``) or single id
            sequences (yields ``(B, T)``, e.g. for a language model).
        batch_size: examples per batch (the last batch may be smaller).
        pad_id: the id that pads shorter sequences.
        shuffle: shuffle before every pass.
        seed: the order of pass ``e`` is a function of ``seed`` and ``e``.
    """

    def __init__(self, examples: Sequence, batch_size: int, pad_id: int = 0, shuffle: bool = True, seed: int = 0):
        if len(examples) == 0:
            raise ValueError("examples: expected at least one example, got none")
        if batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
        self.examples, self.batch_size, self.pad_id = list(examples), batch_size, pad_id
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.paired = isinstance(self.examples[0], tuple)

    def __len__(self) -> int:
        return -(-len(self.examples) // self.batch_size)

    def __iter__(self) -> Iterator:
        order = list(range(len(self.examples)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        self.epoch += 1
        for start in range(0, len(order), self.batch_size):
            chunk = [self.examples[i] for i in order[start:start + self.batch_size]]
            if self.paired:
                yield pad_sequences([s for s, _ in chunk], self.pad_id), pad_sequences([t for _, t in chunk], self.pad_id)
            else:
                yield pad_sequences(chunk, self.pad_id)


def load_parallel_tsv(path: Union[str, Path], tokenize: Callable[[str], List[str]] = str.split,
                      max_examples: Optional[int] = None) -> List[Pair]:
    """Read ``source<TAB>target`` lines (UTF-8) into token pairs; blank lines are skipped.

    Raises ``ValueError`` naming the line for a line without exactly one tab or with an empty side.

    Args:
        path: the file.
        tokenize: turns one side of a line into tokens (default: split at whitespace).
        max_examples: stop after this many pairs.

    Returns:
        the ``(source_tokens, target_tokens)`` pairs, in file order.
    """
    pairs: List[Pair] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise ValueError(f"{path}: line {lineno}: expected 'source<TAB>target', got {line!r}")
            pairs.append((tokenize(fields[0]), tokenize(fields[1])))
            if max_examples is not None and len(pairs) >= max_examples:
                break
    return pairs
