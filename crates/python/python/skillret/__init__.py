"""skillret: measure how well embedding models and rerankers retrieve agent skills (SkillRet).

The engine, the rerankers and the metrics of the `skillret-rs` project, behind the calling conventions
of sentence-transformers (`Embedder`, `CrossEncoder`) and pytrec_eval (`evaluate`). Everything runs in
Rust with the GIL released; nothing here but the names.
"""

from ._skillret import CrossEncoder, Embedder, __version__, evaluate

__all__ = ["CrossEncoder", "Embedder", "evaluate", "__version__"]
