"""tfmini.data: synthetic tasks (deterministic from their seed), Vocab, padding, Batches, the TSV loader."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from tfmini import (Batches, Vocab, copy_task, encode_pairs, load_parallel_tsv, number_words, pad_sequences,
                    reverse_task, sort_task, spelled_numbers)

TASKS = [copy_task, reverse_task, sort_task, spelled_numbers]


# --------------------------------------------------------------------------------------------- tasks

@pytest.mark.parametrize("task", TASKS)
def test_tasks_are_deterministic_from_their_seed(task):
    assert task(50, seed=3) == task(50, seed=3)
    assert task(50, seed=3) != task(50, seed=4)
    assert task(50) == task(50, seed=0)
    assert task(10, seed=5) == task(50, seed=5)[:10]  # a prefix of a longer draw


@pytest.mark.parametrize("task", TASKS)
def test_tasks_return_lists_of_token_pairs(task):
    pairs = task(20, seed=1)
    assert len(pairs) == 20
    for src, tgt in pairs:
        assert isinstance(src, list) and isinstance(tgt, list) and src and tgt
        assert all(isinstance(t, str) for t in src + tgt)


@pytest.mark.parametrize("min_len, max_len, num_symbols", [(1, 1, 2), (3, 10, 10), (5, 7, 4)])
def test_symbol_tasks(min_len, max_len, num_symbols):
    kw = dict(min_len=min_len, max_len=max_len, num_symbols=num_symbols, seed=2)
    copy, rev, srt = copy_task(300, **kw), reverse_task(300, **kw), sort_task(300, **kw)
    lengths = Counter()
    for (s, t), (s2, r), (s3, o) in zip(copy, rev, srt):
        assert s == s2 == s3  # the same sources for the same seed
        assert t == s and r == s[::-1] and o == sorted(s, key=int)
        assert min_len <= len(s) <= max_len
        assert set(s) <= {str(i) for i in range(num_symbols)}
        lengths[len(s)] += 1
    assert set(lengths) == set(range(min_len, max_len + 1))  # every length occurs


def test_sort_task_sorts_numerically():
    pairs = sort_task(200, num_symbols=12, seed=0)
    assert any("10" in s or "11" in s for s, _ in pairs)
    for _, t in pairs:
        assert [int(x) for x in t] == sorted(int(x) for x in t)


@pytest.mark.parametrize("task", [copy_task, reverse_task, sort_task])
@pytest.mark.parametrize("min_len, max_len", [(0, 3), (4, 3)])
def test_tasks_reject_bad_lengths(task, min_len, max_len):
    with pytest.raises(ValueError, match=rf"min_len, max_len: expected 1 <= min_len <= max_len, got {min_len}, {max_len}"):
        task(5, min_len=min_len, max_len=max_len)


# --------------------------------------------------------------------------------------------- spelled numbers

@pytest.mark.parametrize("n, words", [
    (0, ["zero"]), (7, ["seven"]), (10, ["ten"]), (13, ["thirteen"]), (19, ["nineteen"]), (20, ["twenty"]),
    (24, ["four", "and", "twenty"]), (40, ["forty"]), (99, ["nine", "and", "ninety"]), (51, ["one", "and", "fifty"]),
])
def test_number_words(n, words):
    assert number_words(n) == words


UNITS = "zero one two three four five six seven eight nine".split()
TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = {w: i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if w != "_"}


def parse_number(words):
    """Read units-first number words back into an int, independently of the implementation."""
    if len(words) == 1:
        w = words[0]
        return UNITS.index(w) if w in UNITS else (10 + TEENS.index(w) if w in TEENS else 10 * TENS[w])
    units, and_, tens = words
    assert and_ == "and"
    return 10 * TENS[tens] + UNITS.index(units)


def test_number_words_are_unique_and_parse_back():
    spelled = [tuple(number_words(n)) for n in range(100)]
    assert len(set(spelled)) == 100
    assert [parse_number(list(w)) for w in spelled] == list(range(100))


@pytest.mark.parametrize("n", [-1, 100, 250])
def test_number_words_rejects_out_of_range(n):
    with pytest.raises(ValueError, match=rf"n: expected an integer in \[0, 99\], got {n}"):
        number_words(n)


@pytest.mark.parametrize("seed", [0, 1])
def test_spelled_numbers_targets_are_the_digits_of_the_words(seed):
    for src, tgt in spelled_numbers(300, seed=seed):
        numbers = [parse_number(group.split()) for group in " ".join(src).split(" , ")]
        assert "".join(tgt).split(",") == [str(x) for x in numbers]
        assert all(len(t) == 1 for t in tgt)  # one digit or comma per token
        assert len(numbers) <= 8


@pytest.mark.parametrize("min_numbers, max_numbers", [(1, 1), (2, 5), (3, 3)])
def test_spelled_numbers_count_control(min_numbers, max_numbers):
    counts = {src.count(",") + 1 for src, _ in spelled_numbers(300, min_numbers, max_numbers, seed=0)}
    assert counts == set(range(min_numbers, max_numbers + 1))


def test_spelled_numbers_long_sources():
    pairs = spelled_numbers(300, max_numbers=12, seed=0)
    assert max(len(s) for s, _ in pairs) >= 40
    assert max(len(s) for s, _ in pairs) <= 12 * 3 + 11
    assert max(len(s) for s, _ in spelled_numbers(300, max_numbers=4, seed=0)) <= 4 * 3 + 3


def test_spelled_numbers_rejects_bad_counts():
    with pytest.raises(ValueError, match=r"min_len, max_len: expected 1 <= min_len <= max_len, got 3, 2"):
        spelled_numbers(5, min_numbers=3, max_numbers=2)


# --------------------------------------------------------------------------------------------- vocab

def test_vocab_specials_and_order():
    v = Vocab(["b", "a", "c", "a", "<pad>"])
    assert v.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert [v.stoi[s] for s in Vocab.specials] == [0, 1, 2, 3]
    assert v.itos[4:] == ["a", "b", "c"] and len(v) == 7
    assert Vocab(["c", "b", "a"]).itos == v.itos  # the order does not depend on the input order


def test_vocab_encode_decode_round_trip():
    pairs = spelled_numbers(50, seed=0)
    v = Vocab.build(src for src, _ in pairs)
    for src, _ in pairs:
        ids = v.encode(src)
        assert all(i >= 4 for i in ids)
        assert v.decode(ids) == src
        wrapped = v.encode(src, bos=True, eos=True)
        assert wrapped[0] == 1 and wrapped[-1] == 2 and wrapped[1:-1] == ids
        assert v.decode(torch.tensor(wrapped + [0, 0])) == src


def test_vocab_unknown_tokens_and_decode_rules():
    v = Vocab(["x", "y"])
    assert v.encode(["x", "zzz", "y"]) == [4, 3, 5]
    assert v.decode([4, 3, 5]) == ["x", "<unk>", "y"]
    assert v.decode([1, 4, 0, 5, 2, 4, 4]) == ["x", "y"]  # BOS and pads skipped, stop at EOS
    with pytest.raises(ValueError, match=r"ids: expected values in \[0, 5\], got 6"):
        v.decode([4, 6])
    with pytest.raises(ValueError, match=r"ids: expected values in \[0, 5\], got -1"):
        v.decode([-1])


def test_encode_pairs():
    pairs = [(["a", "b"], ["x"]), (["b"], ["y", "x"])]
    sv, tv = Vocab.build(s for s, _ in pairs), Vocab.build(t for _, t in pairs)
    enc = encode_pairs(pairs, sv, tv)
    assert enc == [([4, 5], [1, 4, 2]), ([5], [1, 5, 4, 2])]


# --------------------------------------------------------------------------------------------- padding and batches

@pytest.mark.parametrize("pad_id", [0, 9])
def test_pad_sequences(pad_id):
    out = pad_sequences([[1, 2, 3], [4], [5, 6]], pad_id)
    assert out.dtype == torch.long
    assert out.tolist() == [[1, 2, 3], [4, pad_id, pad_id], [5, 6, pad_id]]
    assert pad_sequences([(7,)]).tolist() == [[7]]


def test_pad_sequences_rejects_empty():
    with pytest.raises(ValueError, match=r"seqs: expected at least one sequence, got an empty list"):
        pad_sequences([])


def paired_examples(n=23):
    return [([i + 1] * (1 + i % 4), [100 + i] * (2 + i % 3)) for i in range(n)]


def ids_of(batches):
    """The identity of every example in one pass, in order (first token of each source)."""
    out = []
    for batch in batches:
        first = batch[0] if isinstance(batch, tuple) else batch
        out += first[:, 0].tolist()
    return out


@pytest.mark.parametrize("batch_size", [1, 4, 5, 23, 50])
def test_batches_cover_every_example_once_per_pass(batch_size):
    ex = paired_examples()
    b = Batches(ex, batch_size, seed=1)
    assert len(b) == -(-23 // batch_size)
    for _ in range(3):
        seen = ids_of(b)
        assert sorted(seen) == list(range(1, 24))
    sizes = [src.shape[0] for src, _ in b]
    assert sizes == [batch_size] * (23 // batch_size) + ([23 % batch_size] if 23 % batch_size else [])


def test_batches_are_deterministic_and_reshuffled_every_epoch():
    ex = paired_examples()
    a, b, c = Batches(ex, 4, seed=1), Batches(ex, 4, seed=1), Batches(ex, 4, seed=2)
    epochs_a = [ids_of(a) for _ in range(3)]
    epochs_b = [ids_of(b) for _ in range(3)]
    assert epochs_a == epochs_b
    assert epochs_a[0] != epochs_a[1] != epochs_a[2]
    assert ids_of(c) != epochs_a[0]
    assert ids_of(Batches(ex, 4, shuffle=False)) == list(range(1, 24))


def test_paired_batches_are_padded_pairs():
    ex = paired_examples(6)
    for src, tgt in Batches(ex, 3, pad_id=0, shuffle=False):
        assert src.dtype == tgt.dtype == torch.long
        for row_s, row_t in zip(src, tgt):
            i = int(row_s[0]) - 1
            s, t = ex[i]
            assert row_s[:len(s)].tolist() == s and (row_s[len(s):] == 0).all()
            assert row_t[:len(t)].tolist() == t and (row_t[len(t):] == 0).all()


def test_single_sequence_batches():
    seqs = [[i + 1] * (1 + i % 3) for i in range(10)]
    b = Batches(seqs, 4, pad_id=0, seed=0)
    batches = list(b)
    assert all(isinstance(x, torch.Tensor) for x in batches)
    assert sorted(ids_of(batches)) == list(range(1, 11))
    assert [x.shape[0] for x in batches] == [4, 4, 2]


@pytest.mark.parametrize("examples, batch_size, match", [
    ([], 2, r"examples: expected at least one example, got none"),
    ([[1]], 0, r"batch_size: expected >= 1, got 0"),
])
def test_batches_reject_bad_arguments(examples, batch_size, match):
    with pytest.raises(ValueError, match=match):
        Batches(examples, batch_size)


# --------------------------------------------------------------------------------------------- TSV loader

def test_load_parallel_tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Guten Morgen\tgood morning\n\n  \nKäse über Brücken\tcheese over bridges\r\n"
                    "naïve café\tnaive cafe\n", encoding="utf-8")
    pairs = load_parallel_tsv(path)
    assert pairs == [(["Guten", "Morgen"], ["good", "morning"]),
                     (["Käse", "über", "Brücken"], ["cheese", "over", "bridges"]),
                     (["naïve", "café"], ["naive", "cafe"])]
    assert load_parallel_tsv(str(path), max_examples=2) == pairs[:2]
    assert load_parallel_tsv(path, tokenize=list)[0] == (list("Guten Morgen"), list("good morning"))


@pytest.mark.parametrize("bad_line", ["no tab here", "a\tb\tc", "\tmissing source", "missing target\t  "])
def test_load_parallel_tsv_names_the_malformed_line(tmp_path, bad_line):
    path = tmp_path / "bad.tsv"
    path.write_text(f"one\teins\n\ntwo\tzwei\n{bad_line}\nthree\tdrei\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 4: expected 'source<TAB>target', got"):
        load_parallel_tsv(path)


def test_spelled_numbers_alignment_points_at_the_word_each_digit_comes_from():
    from tfmini import spelled_numbers_alignment
    src = ["four", "and", "twenty", ",", "seven", ",", "thirteen", ",", "forty"]
    #       0        1       2        3     4       5     6           7     8
    # target: 2 4 , 7 , 1 3 , 4 0
    assert spelled_numbers_alignment(src) == [2, 0, 3, 4, 5, 6, 6, 7, 8, 8]
    for s, t in spelled_numbers(200, 1, 12, seed=3):
        a = spelled_numbers_alignment(s)
        assert len(a) == len(t)
        for tok, j in zip(t, a):
            assert (tok == ",") == (s[j] == ",")
    with pytest.raises(ValueError, match=r"src: expected a spelled_numbers source, got the group \['and'\]"):
        spelled_numbers_alignment(["and"])
