"""tfmini.tokenizer: byte-level BPE, against a plain reference loop, Hugging Face's tokenizers and
hypothesis' strings."""
import json
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tfmini
from tfmini.tokenizer import GPT2_SPLIT_PATTERN, BPETokenizer, gpt2_byte_chars, gpt2_split_regex, merge_pair, pair_counts

HARD = ["", " ", "   ", "\n\n", "\r\n", "a\r\nb", "\t\t x", "e\u0301", "\u00e9", "👋🏽", "👨‍👩‍👧", "世界", "日本語の文",
        "\x00\x01\x7f", "\u200b", "\ufeff", "\ud800", "a\udfffb", "it's", "I'M", "x_y", "__init__", "²³", "١٢٣",
        "  leading", "trailing  ", "\u00a0", "Ⅻ", "\U0010ffff"]


def reference_train(text, vocab_size, segmentation=False):
    """The plainest BPE: recount every pair after every merge. With segmentation=True, also return each
    distinct chunk's ids at the end of training."""
    chunks = Counter(gpt2_split_regex().findall(text))
    ids = {c: tuple(c.encode("utf-8", "surrogatepass")) for c in chunks}
    merges = []
    while len(merges) < vocab_size - 256:
        counts = Counter()
        for c, w in ids.items():
            for pair in zip(w, w[1:]):
                counts[pair] += chunks[c]
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))   # most frequent, then the smallest pair
        merges.append(best)
        ids = {c: tuple(merge_pair(w, best, 255 + len(merges))) for c, w in ids.items()}
    return (merges, ids) if segmentation else merges


def replay_encode(tok, text):
    """Encoding by replaying every merge in training order over each chunk: slow, and independent of
    the rank-based loop of BPETokenizer.encode."""
    out = []
    for chunk in tok.split(text):
        ids = list(chunk.encode("utf-8", "surrogatepass"))
        for i, pair in enumerate(tok.merges):
            ids = merge_pair(ids, pair, 256 + i)
        out.extend(ids)
    return out


@pytest.fixture(scope="module")
def source():
    return tfmini.python_source_text(max_chars=120_000)


@pytest.fixture(scope="module")
def tok(source):
    # Trained on code plus some multi-byte text, so that merges also join bytes of one character.
    return BPETokenizer.train(source + " héllo wörld naïve café 世界 世界 世界 👋👋 ", 700)


def test_classic_example_merges_aa_first():
    tok = BPETokenizer.train("aaabdaaabac", 259)
    assert tok.vocab[256:] == [b"aa", b"ab", b"aaab"]
    assert tok.merges == [(97, 97), (97, 98), (256, 257)]
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]


def test_merge_pair_does_not_overlap():
    assert merge_pair([1, 1, 1], (1, 1), 9) == [9, 1]
    assert merge_pair([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert merge_pair([1, 2, 1, 2, 3], (1, 2), 9) == [9, 9, 3]
    assert merge_pair([], (1, 2), 9) == []


@pytest.mark.parametrize("vocab_size", [256, 257, 300, 600])
def test_train_equals_the_reference_loop(source, vocab_size):
    text = source[:30_000]
    assert BPETokenizer.train(text, vocab_size).merges == reference_train(text, vocab_size)


def test_pair_counts_counts_overlaps_and_weights():
    counts = pair_counts({(1, 1, 1): 2, (1, 2): 3})
    assert counts == {(1, 1): 4, (1, 2): 3}


def test_encoding_a_training_chunk_gives_its_training_segmentation(source):
    text = source[:30_000]
    merges, segmentation = reference_train(text, 400, segmentation=True)
    tok = BPETokenizer(merges)
    for chunk, ids in segmentation.items():
        assert tuple(tok.encode(chunk)) == ids


def test_encode_equals_replaying_the_merges_in_order(tok, source):
    for text in [source[60_000:70_000], "".join(HARD), " héllo wörld naïve café 世界 👋👋 "]:
        assert tok.encode(text) == replay_encode(tok, text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=8), st.sampled_from([" def", " self", "    ", " 世界", "é"]))))
def test_encode_equals_replay_on_any_text(tok, pieces):
    text = "".join(pieces)
    assert tok.encode(text) == replay_encode(tok, text)


def test_ties_go_to_the_smallest_pair():
    # "ab" and "cd" occur twice each, the only pairs; (97, 98) < (99, 100), whatever comes first.
    assert BPETokenizer.train("ab.cd.ab.cd", 257).merges == [(97, 98)]
    assert BPETokenizer.train("cd.ab.cd.ab", 257).merges == [(97, 98)]


@pytest.mark.parametrize("vocab_size", [256, 257, 512, 1000])
def test_vocab_size_is_respected(source, vocab_size):
    tok = BPETokenizer.train(source, vocab_size)
    assert tok.vocab_size == vocab_size == len(tok.vocab) == 256 + len(tok.merges)
    assert max(tok.encode(source[:5000])) < vocab_size


def test_training_stops_when_every_chunk_is_one_token():
    tok = BPETokenizer.train("ab ab", 10_000)                  # chunks "ab" and " ab"
    assert tok.vocab[256:] == [b"ab", b" ab"]
    assert tok.vocab_size == 258 <= 10_000
    assert tok.encode("ab ab") == [256, 257]


def test_vocab_entries_are_the_bytes_of_their_merge(tok):
    for i, (a, b) in enumerate(tok.merges):
        assert tok.vocab[256 + i] == tok.vocab[a] + tok.vocab[b]
        assert a < 256 + i and b < 256 + i


def test_multibyte_characters_are_merged():
    tok = BPETokenizer.train("世界 世界 世界 👋👋", 270)
    assert " 世界".encode() in tok.vocab and " 👋👋".encode() in tok.vocab          # every chunk is one token
    assert tok.encode(" 世界") == [tok.vocab.index(" 世界".encode())]


@pytest.mark.parametrize("text", HARD)
def test_round_trip_on_hard_strings(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)


def test_chunks_concatenate_to_the_text(tok, source):
    for text in HARD + [source[:5000], "".join(HARD)]:
        assert "".join(tok.split(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_property(tok, text):
    assert tok.decode(tok.encode(text)) == text


# Every code point, surrogates included (st.text() leaves them out), and the awkward pieces of HARD.
ANY_CHAR = st.integers(min_value=0, max_value=0x10FFFF).map(chr)
PIECES = st.lists(st.one_of(ANY_CHAR, st.sampled_from(HARD), st.sampled_from([" ", "  ", "\n", " def", "x"])))


@settings(max_examples=300, deadline=None)
@given(PIECES.map("".join))
def test_round_trip_property_every_code_point(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) <= len(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1), st.integers(min_value=256, max_value=400))
def test_training_on_any_text_round_trips(text, vocab_size):
    tok = BPETokenizer.train(text, vocab_size)
    assert tok.vocab_size <= vocab_size
    assert tok.decode(tok.encode(text)) == text


def test_encode_is_the_same_with_and_without_the_cache(tok, source):
    text = source[50_000:60_000]
    first = tok.encode(text)
    assert tok.encode(text) == first
    assert BPETokenizer(tok.merges).encode(text) == first


def test_decode_of_a_cut_character(tok):
    ids = list("é".encode())                   # two byte tokens
    assert tok.decode(ids[:1]) == "\ufffd"
    with pytest.raises(ValueError, match="not valid UTF-8"):
        tok.decode(ids[:1], errors="strict")


def test_save_and_load(tok, tmp_path, source):
    path = tmp_path / "bpe.json"
    tok.save(path)
    again = BPETokenizer.load(path)
    assert again.merges == tok.merges and again.pattern == tok.pattern
    assert again.encode(source[:3000]) == tok.encode(source[:3000])


@pytest.mark.parametrize("vocab_size", [255, 0, -1, 256.0, "512", True, None])
def test_bad_vocab_size(vocab_size):
    with pytest.raises(ValueError, match="vocab_size: expected an int >= 256"):
        BPETokenizer.train("some text", vocab_size)


@pytest.mark.parametrize("call", [lambda t: t.encode(None), lambda t: t.encode(b"bytes"), lambda t: t.split(3),
                                  lambda t: BPETokenizer.train(["a list"], 300)])
def test_text_must_be_a_str(tok, call):
    with pytest.raises(ValueError, match="text: expected a str"):
        call(tok)


@pytest.mark.parametrize("ids", [[-1], [700], [1.0], [True], ["a"], [None]])
def test_bad_ids(tok, ids):
    with pytest.raises(ValueError, match=r"ids: expected ints in \[0, 700\)"):
        tok.decode(ids)


def test_decode_takes_tensors_and_arrays(tok):
    import numpy as np
    import torch

    ids = tok.encode("hello world")
    assert tok.decode(torch.tensor(ids)) == tok.decode(np.array(ids)) == tok.decode(tuple(ids)) == "hello world"


@pytest.mark.parametrize("errors", ["no-such-handler", 3, None])
def test_bad_errors_handler(tok, errors):
    with pytest.raises(ValueError, match="errors: expected an error handler"):
        tok.decode([104, 105], errors=errors)


@pytest.mark.parametrize("pattern", [r"\S+|\s+", r"(\w)\w*|\W"])
def test_custom_patterns_round_trip_and_save(pattern, tmp_path):
    text = "def f(x):\n    return x_1 + 2  # café"
    tok = BPETokenizer.train(text * 3, 300, pattern=pattern)
    assert tok.pattern == pattern and "".join(tok.split(text)) == text
    assert tok.decode(tok.encode(text)) == text
    tok.save(tmp_path / "p.json")
    again = BPETokenizer.load(tmp_path / "p.json")
    assert again.pattern == pattern and again.encode(text) == tok.encode(text)


def test_a_pattern_that_leaves_text_out_is_refused():
    tok = BPETokenizer(pattern=r"\w+")
    with pytest.raises(ValueError, match="pattern: its matches do not cover the text"):
        tok.encode("a b")
    with pytest.raises(ValueError, match="pattern: its matches do not cover the text"):
        BPETokenizer.train("a b", 300, pattern=r"\w+")


@pytest.mark.parametrize("merges, message", [([(256, 1)], r"merges\[0\]: expected a pair of ids below 256"),
                                             ([(1, 2, 3)], r"merges\[0\]"), ([(1, 2), (1, 2)], "repeated pair"),
                                             ([(1, -2)], r"merges\[0\]"), ([5], r"merges\[0\]"),
                                             (["ab"], r"merges\[0\]")])
def test_bad_merges(merges, message):
    with pytest.raises(ValueError, match=message):
        BPETokenizer(merges)


def test_bad_pattern():
    with pytest.raises(ValueError, match="pattern: not a valid regular expression for Python's re"):
        BPETokenizer(pattern="(")


def test_load_rejects_other_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": {}}))
    with pytest.raises(ValueError, match="tfmini-bpe"):
        BPETokenizer.load(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="is not JSON"):
        BPETokenizer.load(bad)
    bad.write_text(json.dumps({"format": "tfmini-bpe", "version": 1}))
    with pytest.raises(ValueError, match="no list of merges and pattern string"):
        BPETokenizer.load(bad)


# ---- against Hugging Face's tokenizers -----------------------------------------------------------

def _byte_level_alphabet():
    return dict(enumerate(gpt2_byte_chars()))


def test_gpt2_byte_chars_is_hugging_faces_byte_level_alphabet():
    chars = gpt2_byte_chars()
    assert len(set(chars)) == 256 and chars[ord("a")] == "a" and chars[ord(" ")] == "Ġ" and chars[ord("\n")] == "Ċ"
    tokenizers = pytest.importorskip("tokenizers")
    assert set(chars) == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())


def test_pre_tokenization_equals_hugging_face(tok, source):
    tokenizers = pytest.importorskip("tokenizers")
    b2u = _byte_level_alphabet()
    hf = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    for text in [source[:40_000], "".join(h for h in HARD if not "\ud800" <= h[:1] <= "\udfff" and "\udfff" not in h),
                 "héllo wörld, naïve café: 世界 👋 it's I'M x_y __init__ 3.14 -- a\r\n\tb  c"]:
        ours = ["".join(b2u[b] for b in c.encode()) for c in tok.split(text)]
        assert ours == [w for w, _ in hf.pre_tokenize_str(text)]


def test_merges_and_compression_match_hugging_face(source):
    tokenizers = pytest.importorskip("tokenizers")
    u2b = {c: b for b, c in _byte_level_alphabet().items()}
    hf = tokenizers.Tokenizer(tokenizers.models.BPE())
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=512, show_progress=False, special_tokens=[],
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator([source[:100_000]], trainer=trainer)
    ours = BPETokenizer.train(source[:100_000], 512)
    hf_merges = json.loads(hf.to_str())["model"]["merges"]
    hf_merges = [m.split(" ") if isinstance(m, str) else m for m in hf_merges]
    hf_merges = {tuple(bytes(u2b[c] for c in part) for part in m) for m in hf_merges}
    our_merges = {(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges}
    assert hf.get_vocab_size() == ours.vocab_size == 512
    assert len(hf_merges & our_merges) >= 0.95 * len(our_merges)
    held_out = source[100_000:]
    assert abs(len(hf.encode(held_out).ids) - len(ours.encode(held_out))) <= 0.01 * len(ours.encode(held_out))


def test_encode_equals_hugging_face_bpe_with_our_merges(tok, source):
    """Hugging Face's BPE model, given tfmini's merges, encodes to exactly tfmini's ids."""
    tokenizers = pytest.importorskip("tokenizers")
    b2u = _byte_level_alphabet()
    as_chars = lambda b: "".join(b2u[x] for x in b)
    vocab = {as_chars(b): i for i, b in enumerate(tok.vocab)}
    assert len(vocab) == tok.vocab_size                      # no two merges make the same bytes here
    hf = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[(as_chars(tok.vocab[a]), as_chars(tok.vocab[b]))
                                                                         for a, b in tok.merges]))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    for text in [source[70_000:], "".join(h for h in HARD if not any("\ud800" <= ch <= "\udfff" for ch in h)),
                 " héllo wörld naïve café 世界 👋👋 "]:
        assert hf.encode(text).ids == tok.encode(text)


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs", "Cn"))))      # assigned characters; HF refuses surrogates
def test_pre_tokenization_equals_hugging_face_on_any_text(tok, text):
    tokenizers = pytest.importorskip("tokenizers")
    b2u = _byte_level_alphabet()
    hf = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert ["".join(b2u[b] for b in c.encode()) for c in tok.split(text)] == [w for w, _ in hf.pre_tokenize_str(text)]


@pytest.mark.parametrize("errors, tail", [("replace", "\ufffd"), ("ignore", "")])
def test_decode_of_a_cut_character_keeps_the_lone_surrogates(errors, tail):
    """Ids that cut a character in two fall back to ``errors`` for those bytes only: a lone surrogate
    of the text (encoded with surrogatepass) still decodes to itself."""
    tok = BPETokenizer([])  # bytes only
    ids = tok.encode("a\ud800b") + list("é".encode())[:1]  # the first byte of a two-byte character
    assert tok.decode(ids, errors=errors) == "a\ud800b" + tail
