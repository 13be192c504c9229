"""Type stubs of the skillret package (the native module `skillret._skillret`)."""

from os import PathLike
from typing import Literal, Mapping, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Path = Union[str, "PathLike[str]"]
_Texts = Union[str, Sequence[str]]

class Embedder:
    """A bi-encoder with sentence-transformers' calling conventions, on this project's engine.

    `model` is a model directory, or a Hub id with `revision` (a 40-hex commit; the local cache first).
    Prompts, pooling, normalisation and the maximum length come from the model's files.
    """

    def __init__(
        self,
        model: str,
        precision: Literal["f32", "bf16", "int8"] = "f32",
        device: Literal["cpu", "cuda"] = "cpu",
        max_length: Optional[int] = None,
        revision: Optional[str] = None,
        backend: Optional[Literal["native", "candle", "cuda"]] = None,
        batch_tokens: Optional[int] = None,
    ) -> None: ...
    def encode(
        self,
        texts: _Texts,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: Optional[int] = None,
        normalize_embeddings: Optional[bool] = None,
        show_progress_bar: bool = False,
        convert_to_numpy: bool = True,
    ) -> npt.NDArray[np.float32]:
        """(n, dim) for a list of texts, (dim,) for one string; `prompt_name` is "query" or "document"."""
    def encode_query(
        self, texts: _Texts, normalize_embeddings: Optional[bool] = None, show_progress_bar: bool = False
    ) -> npt.NDArray[np.float32]:
        """Queries with the model's query prompt (float32, (n, dim), or (dim,) for one string)."""
    def encode_document(
        self, texts: _Texts, normalize_embeddings: Optional[bool] = None, show_progress_bar: bool = False
    ) -> npt.NDArray[np.float32]:
        """Documents with the model's document prompt."""
    def similarity(self, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Cosine similarity of every row of `a` with every row of `b`."""
    @property
    def prompts(self) -> dict[str, str]: ...
    @property
    def dim(self) -> int: ...
    @property
    def max_seq_length(self) -> int: ...

class CrossEncoder:
    """A reranker with sentence-transformers' `CrossEncoder` conventions: BERT and XLM-R cross-encoders,
    Qwen3 yes/no rerankers, and models sentence-transformers 6.x saved (prompts, chat templates)."""

    def __init__(
        self,
        model: str,
        precision: Literal["f32", "bf16", "int8"] = "f32",
        device: Literal["cpu", "cuda"] = "cpu",
        max_length: Optional[int] = None,
        revision: Optional[str] = None,
        backend: Optional[Literal["native", "candle", "cuda"]] = None,
        instruction: Optional[str] = None,
    ) -> None: ...
    def predict(
        self,
        pairs: Sequence[tuple[str, str]],
        activation_fn: Optional[Literal["identity", "sigmoid"]] = None,
        show_progress_bar: bool = False,
    ) -> npt.NDArray[np.float32]:
        """One score per pair, in order."""
    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: Optional[int] = None,
        return_documents: bool = False,
    ) -> list[dict[str, Union[int, float, str]]]:
        """`{"corpus_id", "score"[, "text"]}` per document, best first."""

def evaluate(
    qrels: Union[Mapping[str, Mapping[str, int]], _Path],
    run: Union[Mapping[str, Mapping[str, float]], _Path],
    k: Sequence[int] = (5, 10, 15),
    metrics: Optional[Sequence[str]] = None,
    per_query: bool = False,
    extended: bool = False,
    split: str = "test",
) -> dict[str, object]:
    """The metrics of `pipeline eval` (trec_eval's rules, as pytrec_eval computes them): `NDCG@k`,
    `Recall@k`, `MAP@k`, `Precision@k`, `Completeness@k`, `HitRate@k`, `MRR`, `queries` (and `ERR@k`,
    `RBP(p=0.8)` with `extended`); `metrics` keeps those named (`"NDCG"` keeps every `NDCG@k`);
    `per_query` adds `{"per_query": {query: {metric: value}}}`. `qrels` and `run` are pytrec_eval's
    nested dicts or paths (TREC files, the official output JSON, a SkillRet qrels file of `split`)."""

def run(
    config: _Path, data: Optional[_Path] = None, out: Optional[_Path] = None, **overrides: object
) -> dict[str, object]:
    """`pipeline run` in this process (its flags as keyword arguments: `top_n=50`, `precision="bf16"`),
    returning the contents of its `results.json`; a failure raises the CLI's message."""

def sweep(
    configs: _Path, out: _Path, data: Optional[_Path] = None, **overrides: object
) -> dict[str, dict[str, object]]:
    """`pipeline sweep` in this process, returning each job's `results.json` by job name."""

def main() -> None:
    """The `skillret` console script: the `pipeline` command line."""

def load_dataset(
    data: _Path, split: str = "test"
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict[str, dict[str, int]]]:
    """A SkillRet split as every stage reads it: (queries, documents, qrels); a document's text is
    `name | description | skill_md` (the official recipe)."""
