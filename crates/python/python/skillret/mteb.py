"""MTEB 2.x on this project's engine: `model(...)` is an encoder `mteb.evaluate` accepts, and
`skillret_task(data)` a retrieval task built from a SkillRet data directory (offline).

    import mteb, skillret.mteb
    encoder = skillret.mteb.model("models/all-MiniLM-L6-v2")
    task = skillret.mteb.skillret_task("../shared/skillret-sample")
    result = mteb.evaluate(encoder, task, cache=None)

Requires the `mteb` package (not a dependency of skillret).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import numpy as np

from . import _skillret
from ._skillret import Embedder

try:
    import mteb
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata
    from mteb.models import ModelMeta
    from mteb.models.abs_encoder import AbsEncoder
    from mteb.types import PromptType
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("skillret.mteb needs the mteb package (pip install mteb)") from error


class SkillretEncoder(AbsEncoder):
    """An MTEB encoder on `skillret.Embedder`: queries get the model's query prompt and documents its
    document prompt (as sentence-transformers' `encode_query` / `encode_document`), unless `prompts` names
    others, looked up as MTEB looks them up (task name and prompt type, task name, task type and prompt type,
    task type, prompt type)."""

    def __init__(
        self,
        model_name: str,
        revision: Optional[str] = None,
        device: Optional[str] = None,
        precision: str = "f32",
        prompts: Optional[Dict[str, str]] = None,
        **kwargs: Any,
    ) -> None:
        self.model = Embedder(model_name, precision=precision, device=device or "cpu", revision=revision, **kwargs)
        own = self.model.prompts
        self.model_prompts = {
            PromptType.query.value: own["query"],
            PromptType.document.value: own["document"],
            **(prompts or {}),
        }
        name = os.path.basename(os.path.normpath(model_name)) if os.path.isdir(model_name) else model_name
        self.mteb_model_meta = ModelMeta(
            loader=None,
            name=f"skillret/{name}" if "/" not in name else name,
            revision=revision or "local",
            release_date=None,
            languages=None,
            n_parameters=None,
            memory_usage_mb=None,
            max_tokens=self.model.max_seq_length,
            embed_dim=self.model.dim,
            license=None,
            open_weights=True,
            public_training_code=None,
            public_training_data=None,
            framework=["NumPy"],
            similarity_fn_name="cosine",
            use_instructions=bool(own["query"] or own["document"] or prompts),
            training_datasets=None,
            experiment_kwargs={"engine": "skillret", "precision": precision},
        )

    def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
        texts = [text for batch in inputs for text in batch["text"]]
        name = self.get_prompt_name(task_metadata, prompt_type)
        prompt = self.model_prompts.get(name, "") if name else ""
        vectors = self.model.encode(texts, prompt=prompt)
        return np.asarray(vectors, dtype=np.float32)


def model(name_or_dir: str, precision: str = "f32", **kwargs: Any) -> SkillretEncoder:
    """An MTEB encoder for a model directory (or a Hub id with `revision=`) on this project's engine."""
    return SkillretEncoder(name_or_dir, precision=precision, **kwargs)


def skillret_task(data: str, split: str = "test", name: str = "SkillRetSample") -> AbsTaskRetrieval:
    """A retrieval task over a SkillRet data directory (the official layout), read offline: the queries,
    the skills as `name | description | skill_md` (the text every stage of the pipeline embeds) and the
    judgements of `split`; main score NDCG@10."""
    from datasets import Dataset
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

    queries, documents, qrels = _skillret.load_dataset(os.fspath(data), split)

    class SkillRetTask(AbsTaskRetrieval):
        metadata = TaskMetadata(
            name=name,
            description=f"SkillRet data read from {os.fspath(data)} ({split} split) by skillret.mteb.",
            reference="https://arxiv.org/abs/2605.05726",
            dataset={"path": os.fspath(data), "revision": "local"},
            type="Retrieval",
            category="t2t",
            modalities=["text"],
            eval_splits=[split],
            eval_langs=["eng-Latn"],
            main_score="ndcg_at_10",
            date=None,
            domains=None,
            task_subtypes=None,
            license=None,
            annotations_creators=None,
            dialect=None,
            sample_creation=None,
            bibtex_citation=None,
        )

        def load_data(self, num_proc=None, **kwargs):
            self.dataset = {
                "default": {
                    split: RetrievalSplitData(
                        queries=Dataset.from_list([{"id": i, "text": t} for i, t in queries]),
                        corpus=Dataset.from_list([{"id": i, "text": t} for i, t in documents]),
                        relevant_docs=qrels,
                        top_ranked=None,
                    )
                }
            }
            self.data_loaded = True

    return SkillRetTask()


__all__ = ["SkillretEncoder", "model", "skillret_task", "mteb"]
