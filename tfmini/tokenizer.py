"""Tokens: a byte-level byte-pair-encoding (BPE) tokenizer, as GPT-2 builds its vocabulary.

The base alphabet is the 256 byte values, so every string has an encoding and no token is ever
unknown. A text is first cut into chunks (words with their leading space, runs of digits, runs of
punctuation, runs of spaces) by :data:`GPT2_SPLIT_PATTERN`; merges never cross a chunk boundary.
Training counts adjacent pairs of ids inside the chunks, weighted by how often each chunk occurs,
and repeatedly replaces the most frequent pair by a new id (Sennrich et al., 2016; Radford et al.,
2019). Encoding applies the learned merges by rank, lowest first; decoding concatenates the bytes.

``id < 256`` is the byte ``id``; ``id = 256 + i`` is the ``i``-th merge. A tokenizer is its list of
merges and its split pattern, nothing else. What counts as a letter, a number or a space when cutting
chunks follows this Python's Unicode tables (:mod:`unicodedata`), not those of the ``regex`` package.

:meth:`BPETokenizer.from_huggingface` reads a trained byte-level BPE tokenizer of Hugging Face's
(GPT-2's, SmolLM2's, Llama 3's): its vocabulary numbers the tokens its own way (the bytes are not ids
0 to 255), its merges have ranks apart from ids, its pre-tokenizer may be a sequence of splits (a
regular expression, single digits), and its added tokens (``<|endoftext|>``, ``<|im_end|>``) are
taken out of the text before anything else, as Hugging Face's tokenizer does.
"""
from __future__ import annotations

import codecs
import functools
import heapq
import json
import operator
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

__all__ = ["BPETokenizer", "GPT2_SPLIT_PATTERN", "gpt2_byte_chars", "gpt2_split_regex", "merge_pair", "pair_counts"]

GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
r"""GPT-2's pre-tokenization pattern (Radford et al., 2019), as GPT-2 writes it for the ``regex`` package.

Python's :mod:`re` has no ``\p{L}`` (letters) or ``\p{N}`` (numbers), and its ``\s`` also matches
four control characters (U+001C to U+001F) that Unicode does not count as white space. A tokenizer
built with this pattern therefore compiles :func:`gpt2_split_regex`, the same pattern with the three
classes spelled out from :mod:`unicodedata`, so it cuts text as GPT-2 does."""

# Unicode's White_Space property: what \s means in the regex package and in Hugging Face's tokenizers.
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_GPT2_REGEX: Optional["re.Pattern"] = None


@functools.lru_cache(maxsize=None)
def _category_class(first_letter: str) -> str:
    """The body of a character class of every code point whose Unicode category starts with
    ``first_letter`` (one letter, ``"L"``, or a whole category, ``"Lu"``)."""
    parts, start = [], None
    for cp in range(0x110001):
        inside = cp < 0x110000 and unicodedata.category(chr(cp)).startswith(first_letter)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            a, b = (f"\\U{x:08x}" for x in (start, cp - 1))
            parts.append(a if start == cp - 1 else f"{a}-{b}")
            start = None
    return "".join(parts)


def gpt2_split_regex() -> "re.Pattern":
    """:data:`GPT2_SPLIT_PATTERN` compiled for :mod:`re`.

    Returns:
        the compiled pattern, with ``\\p{L}``, ``\\p{N}`` and ``\\s`` spelled out as character
        classes; built once, on first use, from this Python's :mod:`unicodedata`.
    """
    global _GPT2_REGEX
    if _GPT2_REGEX is None:
        L, N, S = _category_class("L"), _category_class("N"), _WHITE_SPACE
        _GPT2_REGEX = re.compile(f"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+")
    return _GPT2_REGEX


def gpt2_byte_chars() -> List[str]:
    """GPT-2's printable stand-in character for each byte value, as Hugging Face's ByteLevel writes tokens.

    Returns:
        256 distinct one-character strings, one per byte value. A printable Latin-1 byte stands for
        itself; the others (spaces, controls and the like) get the characters from U+0100 on, in order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def _onig_to_re(pattern: str) -> str:
    r"""A regular expression of Hugging Face's tokenizers (Oniguruma syntax) for Python's :mod:`re`:
    ``\p{L}``, ``\p{N}``, ``\p{Lu}``... and ``\s``, ``\S`` spelled out from :mod:`unicodedata` and
    Unicode's White_Space, inside character classes too. Python 3.11's :mod:`re` has the rest (scoped
    flags ``(?i:...)``, possessive quantifiers)."""
    out, i, depth = [], 0, 0  # depth > 0: inside [...]
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "pP" and pattern[i + 2:i + 3] == "{":
                end = pattern.index("}", i)
                body = _category_class(pattern[i + 3:end])
                if nxt == "P" and depth:
                    raise ValueError(f"pattern: \\P{{...}} inside a character class is not supported, got {pattern!r}")
                out.append(body if depth else (f"[{body}]" if nxt == "p" else f"[^{body}]"))
                i = end + 1
                continue
            if nxt in "sS":
                if nxt == "S" and depth:
                    raise ValueError(f"pattern: \\S inside a character class is not supported, got {pattern!r}")
                out.append(_WHITE_SPACE if depth else (f"[{_WHITE_SPACE}]" if nxt == "s" else f"[^{_WHITE_SPACE}]"))
                i += 2
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and depth == 0:
            depth = 1
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":  # a literal ] first in a class
                out.append("\\]")
                i += 1
        elif c == "]" and depth:
            depth = 0
            out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


Pair = Tuple[int, int]


def pair_counts(words: Dict[Tuple[int, ...], int]) -> Counter:
    """How often each adjacent pair of ids occurs in a corpus of words.

    Args:
        words: each word as a tuple of ids, mapped to how many times it occurs.

    Returns:
        a :class:`~collections.Counter` of ``(a, b)`` pairs; a pair inside a word of count ``n``
        counts ``n`` times, and ``(a, a)`` in ``a a a`` counts twice.
    """
    counts: Counter = Counter()
    for ids, n in words.items():
        for pair in zip(ids, ids[1:]):
            counts[pair] += n
    return counts


def merge_pair(ids: Sequence[int], pair: Pair, new_id: int) -> List[int]:
    """Replace every occurrence of ``pair`` in ``ids``, scanning left to right, by ``new_id``.

    Args:
        ids: a sequence of token ids.
        pair: the two adjacent ids to replace.
        new_id: the id that replaces them.

    Returns:
        a new list of ids. Occurrences do not overlap, so ``merge_pair([a, a, a], (a, a), z)`` is ``[z, a]``.
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _check_text(text, name: str) -> None:
    if not isinstance(text, str):
        raise ValueError(f"{name}: expected a str, got {type(text).__name__}")


def _to_bytes(text: str) -> bytes:
    # surrogatepass: a Python str may hold a lone surrogate (U+D800..U+DFFF), which strict UTF-8
    # refuses; with it, every str has bytes and decodes back to itself.
    return text.encode("utf-8", errors="surrogatepass")


def _surrogatepass_or(errors: str) -> str:
    """The name of a decode error handler that keeps encoded surrogates (``"surrogatepass"``) and hands
    every other invalid byte to the handler ``errors``."""
    name = f"tfmini.surrogatepass+{errors}"
    try:
        codecs.lookup_error(name)
    except LookupError:
        keep, other = codecs.lookup_error("surrogatepass"), codecs.lookup_error(errors)

        def handler(exc):
            try:
                return keep(exc)
            except UnicodeDecodeError:
                return other(exc)

        codecs.register_error(name, handler)
    return name


class BPETokenizer:
    """A byte-level BPE tokenizer: ``encode(str) -> list[int]``, ``decode(list[int]) -> str``.

    Build one with :meth:`train`, or from a list of merges; :meth:`save` and :meth:`load` write and
    read it as JSON.

    Args:
        merges: the merges in the order they were learned; merge ``i`` turns the pair
            ``(a, b)`` into the id ``256 + i``, and ``a``, ``b`` must be ids that exist before it.
        pattern: the pre-tokenization regular expression, for Python's :mod:`re` (default
            :data:`GPT2_SPLIT_PATTERN`, which is compiled as :func:`gpt2_split_regex`). Its matches
            must cover the text: a text with characters that no match takes is refused.

    ``merges``, ``vocab`` and ``ranks`` describe the tokenizer; treat them as read-only (a changed
    list would disagree with the other two and with the cache of encoded chunks).

    A tokenizer made by :meth:`from_huggingface` has Hugging Face's ids, and :attr:`special`, the
    added tokens that :meth:`encode` finds in a text; :meth:`save` refuses it (save the Hugging Face
    tokenizer instead).
    """

    def __init__(self, merges: Iterable[Sequence[int]] = (), pattern: str = GPT2_SPLIT_PATTERN):
        if not isinstance(pattern, str):
            raise ValueError(f"pattern: expected a str, got {type(pattern).__name__}")
        try:
            self._split = gpt2_split_regex() if pattern == GPT2_SPLIT_PATTERN else re.compile(pattern)
        except re.error as e:
            raise ValueError(f"pattern: not a valid regular expression for Python's re ({e})") from None
        self.pattern = pattern
        self.merges: List[Pair] = []
        self.vocab: List[bytes] = [bytes([b]) for b in range(256)]
        """``vocab[id]`` is the byte string of token ``id``."""
        for i, m in enumerate(merges):
            if (not isinstance(m, (list, tuple)) or len(m) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 256 + i for x in m)):
                raise ValueError(f"merges[{i}]: expected a pair of ids below {256 + i} (the ids that exist "
                                 f"before merge {i}), got {m!r}")
            pair = (int(m[0]), int(m[1]))
            self.merges.append(pair)
            self.vocab.append(self.vocab[pair[0]] + self.vocab[pair[1]])
        self.ranks: Dict[Pair, int] = {pair: 256 + i for i, pair in enumerate(self.merges)}
        """``ranks[(a, b)]`` is the id the pair merges into; a lower id is an earlier merge (of a trained
        tokenizer: one from :meth:`from_huggingface` keeps its merges' order apart, in ``_priority``)."""
        if len(self.ranks) != len(self.merges):
            raise ValueError("merges: expected each pair at most once, got a repeated pair")
        self.special: Dict[str, int] = {}
        """Added tokens (text -> id) that :meth:`encode` takes out of a text whole; empty unless from Hugging Face."""
        self._priority: Dict[Pair, int] = self.ranks  # pair -> merge order (lower first)
        self._byte_ids: Optional[List[Optional[int]]] = None  # id of each byte (None: the byte value itself)
        self._steps: Optional[List["re.Pattern"]] = None  # Hugging Face's pre-tokenizer: isolating splits
        self._special_re: Optional["re.Pattern"] = None
        self._whole: Optional[Dict[bytes, int]] = None  # ignore_merges: a chunk in the vocabulary is one token
        self._cache: Dict[str, Tuple[int, ...]] = {}

    @property
    def vocab_size(self) -> int:
        """The number of token ids, the 256 bytes plus one per merge."""
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"

    def split(self, text: str) -> List[str]:
        """Pre-tokenization: the chunks of ``text``; they concatenate to ``text``."""
        _check_text(text, "text")
        return self._chunks(text)

    def _chunks(self, text: str) -> List[str]:
        if self._steps is not None:
            return self._hf_chunks(text)
        chunks = [m.group(0) for m in self._split.finditer(text)]
        if sum(map(len, chunks)) != len(text):           # only a custom pattern can leave characters out
            raise ValueError(f"pattern: its matches do not cover the text (they take {sum(map(len, chunks))} of "
                             f"{len(text)} characters), so decoding could not give the text back")
        return chunks

    @classmethod
    def train(cls, text: str, vocab_size: int, pattern: str = GPT2_SPLIT_PATTERN) -> "BPETokenizer":
        """Learn ``vocab_size - 256`` merges from ``text``.

        Each step merges the most frequent adjacent pair inside the chunks; among pairs with the
        same count, the smallest ``(a, b)`` wins, so training is deterministic. It stops early when
        every chunk has become one token, so ``vocab_size`` is an upper bound.

        Args:
            text: the training text.
            vocab_size: the number of ids wanted, at least 256 (the bytes).
            pattern: the pre-tokenization regular expression (see the class).

        Returns:
            the trained tokenizer.

        Raises:
            ValueError: ``text`` is not a ``str``, ``vocab_size`` is not an int of at least 256, or
                ``pattern`` is not a regular expression whose matches cover the text.
        """
        _check_text(text, "text")
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 256:
            raise ValueError(f"vocab_size: expected an int >= 256 (the 256 bytes come first), got {vocab_size!r}")
        tok = cls(pattern=pattern)
        chunk_counts = Counter(tok._chunks(text))
        words: List[List[int]] = [list(_to_bytes(c)) for c in chunk_counts]
        freq: List[int] = list(chunk_counts.values())
        counts: Dict[Pair, int] = {}
        where: Dict[Pair, set] = {}                      # pair -> indices of the words that contain it
        for w, ids in enumerate(words):
            for pair in zip(ids, ids[1:]):
                counts[pair] = counts.get(pair, 0) + freq[w]
                where.setdefault(pair, set()).add(w)
        heap = [(-n, pair) for pair, n in counts.items()]  # (-count, pair): most frequent, then smallest pair
        heapq.heapify(heap)
        merges: List[Pair] = []
        while len(merges) < vocab_size - 256 and heap:
            neg, pair = heapq.heappop(heap)
            if counts.get(pair, 0) != -neg:               # stale entry: the count has changed since
                continue
            new_id = 256 + len(merges)
            merges.append(pair)
            changed: Counter = Counter()
            for w in where.pop(pair):
                old = words[w]
                new = merge_pair(old, pair, new_id)
                if len(new) == len(old):                  # stale index entry: the pair is gone
                    continue
                for p in zip(old, old[1:]):
                    changed[p] -= freq[w]
                for p in zip(new, new[1:]):
                    changed[p] += freq[w]
                    if p[0] == new_id or p[1] == new_id:
                        where.setdefault(p, set()).add(w)
                words[w] = new
            for p, d in changed.items():
                if d == 0:
                    continue
                n = counts.get(p, 0) + d
                if n > 0:
                    counts[p] = n
                    heapq.heappush(heap, (-n, p))
                else:
                    counts.pop(p, None)
            counts.pop(pair, None)
        return cls(merges, pattern=pattern)

    def _encode_chunk(self, chunk: str) -> Tuple[int, ...]:
        if chunk in self.special:
            return (self.special[chunk],)
        data = _to_bytes(chunk)
        if self._whole is not None and data in self._whole:
            return (self._whole[data],)
        if self._byte_ids is None:
            ids = list(data)
        else:  # a byte without a token is dropped, as Hugging Face's BPE without an unknown token drops it
            ids = [i for i in map(self._byte_ids.__getitem__, data) if i is not None]
        priority, never = self._priority, 1 << 62
        while len(ids) >= 2:
            pair = min(zip(ids, ids[1:]), key=lambda p: priority.get(p, never))  # the earliest merge present
            if pair not in priority:
                break
            ids = merge_pair(ids, pair, self.ranks[pair])
        return tuple(ids)

    def encode(self, text: str) -> List[int]:
        """The token ids of ``text``: each chunk's bytes, merged by rank (the earliest merge first).

        The ids of each distinct chunk are cached, so a chunk that recurs is merged only once while
        it stays in the cache (which is emptied when it reaches 100,000 chunks). An added token of a
        tokenizer from :meth:`from_huggingface` (:attr:`special`) is one id wherever its text occurs,
        as with Hugging Face's ``encode(text, add_special_tokens=False)``: the text
        ``"<|im_end|>"`` is the end-of-turn token, not ten characters. Text from a user that must
        not smuggle in control tokens should be cleaned of them first."""
        _check_text(text, "text")
        out: List[int] = []
        cache = self._cache
        for chunk in self._chunks(text):
            ids = cache.get(chunk)
            if ids is None:
                ids = self._encode_chunk(chunk)
                if len(cache) >= 100_000:                 # bound the memory on an endless stream of new words
                    cache.clear()
                cache[chunk] = ids
            out.extend(ids)
        return out

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """The text of ``ids``: their bytes, concatenated and read as UTF-8.

        ``decode(encode(s)) == s`` for every ``str`` ``s``. A list of ids that cuts a character in
        two (as sampling can) is not valid UTF-8; ``errors`` says what to do then, as in
        ``bytes.decode``: ``"replace"`` writes U+FFFD, ``"strict"`` raises ``ValueError``.
        ``ids`` may be any iterable of integers: a list, or a 1-D integer tensor or array.
        """
        try:
            codecs.lookup_error(errors)
        except (LookupError, TypeError):
            raise ValueError(f"errors: expected an error handler of bytes.decode such as 'replace' or "
                             f"'strict', got {errors!r}") from None
        n = self.vocab_size
        clean = []
        for i in ids:
            try:
                j = operator.index(i) if not isinstance(i, bool) else -1
            except TypeError:
                j = -1
            if not 0 <= j < n:
                raise ValueError(f"ids: expected ints in [0, {n}), got {i!r}")
            clean.append(j)
        data = b"".join(self.vocab[i] for i in clean)
        try:
            return data.decode("utf-8", errors="surrogatepass")
        except UnicodeDecodeError as e:
            if errors == "strict":
                raise ValueError(f"ids: their bytes are not valid UTF-8 ({e.reason} at byte {e.start})") from None
            return data.decode("utf-8", errors=_surrogatepass_or(errors))  # surrogates kept, other bytes to errors

    def save(self, path: Union[str, Path]) -> None:
        """Write the tokenizer (its pattern and merges) to ``path`` as JSON.

        A tokenizer from :meth:`from_huggingface` is not written (``ValueError``): it is the Hugging
        Face tokenizer's files, which ``hf_tokenizer.save_pretrained`` writes."""
        if self._steps is not None:
            raise ValueError("self: a tokenizer from BPETokenizer.from_huggingface is saved as Hugging Face's "
                             "(hf_tokenizer.save_pretrained(folder)); save writes only merges-and-pattern tokenizers")
        data = {"format": "tfmini-bpe", "version": 1, "pattern": self.pattern, "merges": [list(m) for m in self.merges]}
        Path(path).write_text(json.dumps(data), encoding="utf-8")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "BPETokenizer":
        """Read a tokenizer written by :meth:`save`."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"path: {path} is not JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format") != "tfmini-bpe" or data.get("version") != 1:
            raise ValueError(f"path: expected a tfmini-bpe file of version 1 (written by BPETokenizer.save), "
                             f"got {str(data)[:80]!r}")
        if not isinstance(data.get("merges"), list) or not isinstance(data.get("pattern"), str):
            raise ValueError(f"path: {path} has no list of merges and pattern string")
        return cls(data["merges"], pattern=data["pattern"])

    def _hf_chunks(self, text: str) -> List[str]:
        """Hugging Face's order: added tokens out first, then each split of the pre-tokenizer in turn,
        each keeping both its matches and the text between them ("Isolated")."""
        pieces = [m.group(0) for m in self._special_re.finditer(text)] if self._special_re is not None else [text]
        for regex in self._steps:
            split = []
            for piece in pieces:
                if piece in self.special:
                    split.append(piece)
                    continue
                at = 0
                for m in regex.finditer(piece):
                    if m.start() > at:
                        split.append(piece[at:m.start()])
                    if m.end() > m.start():
                        split.append(m.group(0))
                    at = m.end()
                if at < len(piece):
                    split.append(piece[at:])
            pieces = split
        return [p for p in pieces if p]

    @classmethod
    def from_huggingface(cls, hf_tokenizer: Any) -> "BPETokenizer":
        """A tokenizer that encodes as a Hugging Face byte-level BPE tokenizer does, id for id.

        ``encode(text)`` equals ``hf_tokenizer.encode(text, add_special_tokens=False)`` and ``decode``
        inverts it; the ids are Hugging Face's. What is read from the tokenizer's JSON
        (``backend_tokenizer``): the vocabulary (each token's characters mapped back to bytes through
        :func:`gpt2_byte_chars`), the merges in their order, the pre-tokenizer (``ByteLevel``, whose
        ``use_regex`` is GPT-2's pattern, ``Split`` on a regular expression, translated for Python's
        :mod:`re`, and ``Digits``, alone or in a ``Sequence``), ``ignore_merges``, and the added
        tokens, which :attr:`special` holds: their text is one id wherever it occurs (see
        :meth:`encode`), and decoding gives their text back. A byte that has no token (SmolLM2's
        vocabulary lacks 21: the 13 bytes that UTF-8 never uses and 8 rare control characters such as
        U+0004) is dropped, as Hugging Face's tokenizer drops it (it has no unknown token); ``decode``
        cannot give such a byte back.

        Args:
            hf_tokenizer: a ``transformers`` fast tokenizer (GPT-2's, SmolLM2's), a ``tokenizers.Tokenizer``,
                or the path of a ``tokenizer.json``.

        Returns:
            the tokenizer, with ``vocab_size`` Hugging Face's (added tokens included).

        Raises:
            ValueError: ``hf_tokenizer`` is not one of those, or its tokenizer is not byte-level BPE or
                uses an option not implemented here (a normalizer, a prefix space, dropout, an added
                token that strips spaces): the message names it.
        """
        if isinstance(hf_tokenizer, (str, Path)):
            spec = json.loads(Path(hf_tokenizer).read_text(encoding="utf-8"))
        else:
            backend = getattr(hf_tokenizer, "backend_tokenizer", hf_tokenizer)
            if not callable(getattr(backend, "to_str", None)):
                raise ValueError(f"hf_tokenizer: expected a fast tokenizer of transformers (with a backend_tokenizer), "
                                 f"a tokenizers.Tokenizer or a tokenizer.json path, got {type(hf_tokenizer).__name__}")
            spec = json.loads(backend.to_str())
        return cls._from_json(spec)

    @classmethod
    def _from_json(cls, spec: dict) -> "BPETokenizer":
        def refuse(what, got):
            return ValueError(f"hf_tokenizer: expected {what}, got {got!r} (tfmini does not implement the other)")

        model = spec.get("model") or {}
        if model.get("type") != "BPE":
            raise refuse("a model of type 'BPE'", model.get("type"))
        for key, ok in (("dropout", None), ("continuing_subword_prefix", ""), ("end_of_word_suffix", ""),
                        ("byte_fallback", False)):
            if (model.get(key) or ok) != ok:
                raise refuse(f"model.{key} = {ok!r}", model.get(key))
        normalizer = spec.get("normalizer")
        if normalizer and not (normalizer.get("type") == "Sequence" and not normalizer.get("normalizers")):
            raise refuse("no normalizer (byte-level BPE has none)", normalizer.get("type"))
        steps, byte_level = [], False
        pre = spec.get("pre_tokenizer")
        for step in (pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre] if pre else []):
            kind = step.get("type")
            if kind == "ByteLevel":
                byte_level = True
                if step.get("add_prefix_space"):
                    raise refuse("ByteLevel's add_prefix_space = False", True)
                if step.get("use_regex", True):
                    steps.append(gpt2_split_regex())
            elif kind == "Split":
                if step.get("behavior") != "Isolated" or step.get("invert"):
                    raise refuse("Split with behavior 'Isolated' and invert False", (step.get("behavior"), step.get("invert")))
                pat = step.get("pattern", {})
                steps.append(re.compile(_onig_to_re(pat["Regex"]) if "Regex" in pat else re.escape(pat["String"])))
            elif kind == "Digits":
                N = _category_class("N")
                steps.append(re.compile(f"[{N}]" if step.get("individual_digits") else f"[{N}]+"))
            else:
                raise refuse("pre-tokenizers among ByteLevel, Split, Digits", kind)
        if not byte_level:
            raise refuse("a ByteLevel pre-tokenizer (byte-level BPE)", pre and pre.get("type"))
        # the vocabulary: model tokens are byte-level characters, added tokens their own text
        char_byte = {c: b for b, c in enumerate(gpt2_byte_chars())}
        by_id: Dict[int, bytes] = {}
        for token, i in model.get("vocab", {}).items():
            if any(c not in char_byte for c in token):
                raise refuse("byte-level tokens (GPT-2's characters for bytes)", token)
            by_id[i] = bytes(char_byte[c] for c in token)
        special: Dict[str, int] = {}
        for added in spec.get("added_tokens", []):
            for flag in ("single_word", "lstrip", "rstrip"):
                if added.get(flag):
                    raise refuse(f"added tokens with {flag} = False", added["content"])
            special[added["content"]] = added["id"]
            by_id[added["id"]] = added["content"].encode("utf-8")
        n = max(by_id) + 1 if by_id else 0
        if sorted(by_id) != list(range(n)):
            raise refuse(f"token ids 0 .. {n - 1} without gaps", f"{len(by_id)} ids")
        ids_of = {token: i for token, i in model.get("vocab", {}).items()}
        byte_ids = [ids_of.get(c) for c in gpt2_byte_chars()]  # None: a byte the vocabulary lacks
        tok = cls()
        tok.vocab = [by_id[i] for i in range(n)]
        tok.merges, tok.ranks, tok._priority = [], {}, {}
        for rank, m in enumerate(model.get("merges", [])):
            a, b = m.split(" ") if isinstance(m, str) else m
            if a not in ids_of or b not in ids_of or a + b not in ids_of:
                raise refuse("merges of tokens of the vocabulary into one", m)
            pair = (ids_of[a], ids_of[b])
            if pair not in tok._priority:  # as Hugging Face's: the first listing of a pair counts
                tok.merges.append(pair)
                tok._priority[pair], tok.ranks[pair] = rank, ids_of[a + b]
        tok._byte_ids, tok._steps, tok.special = byte_ids, steps, special
        if special:  # the longest first, so that a token inside a longer one never wins
            alternatives = "|".join(re.escape(t) for t in sorted(special, key=len, reverse=True))
            tok._special_re = re.compile(f"{alternatives}|(?:(?!{alternatives})[\\s\\S])+")
        if model.get("ignore_merges"):
            tok._whole = {by_id[i]: i for i in ids_of.values()}
        tok.pattern = next((s.get("pattern", {}).get("Regex") for s in ([pre] + (pre or {}).get("pretokenizers", []))
                            if s and s.get("type") == "Split"), GPT2_SPLIT_PATTERN)
        return tok
