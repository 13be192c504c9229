"""skillret: measure how well embedding models and rerankers retrieve agent skills (SkillRet).

The engine, the rerankers, the metrics and the pipeline of the `skillret-rs` project, behind the calling
conventions of sentence-transformers (`Embedder`, `CrossEncoder`) and pytrec_eval (`evaluate`); `run` and
`sweep` are the CLI's commands, returning their results. Everything runs in Rust with the GIL released.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Union

from . import _skillret
from ._skillret import CrossEncoder, Embedder, __version__, evaluate, load_dataset

# `sweep` runs each job as a child process of this command line: here, Python with this package.
_skillret.set_child_command(sys.executable, ["-m", "skillret"])

__all__ = ["CrossEncoder", "Embedder", "evaluate", "load_dataset", "run", "sweep", "main", "__version__"]

_PathLike = Union[str, "os.PathLike[str]"]


def _flags(overrides: Dict[str, Any]) -> list:
    """Keyword arguments as the CLI's flags: `top_n=50` is `--top-n 50`, `rerank_depths=[10, 20]` is
    `--rerank-depths 10 --rerank-depths 20`, `True` a bare flag."""
    argv = []
    for key, value in overrides.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, os.fspath(item) if isinstance(item, os.PathLike) else str(item)]
        else:
            argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return argv


def run(config: _PathLike, data: Optional[_PathLike] = None, out: Optional[_PathLike] = None, **overrides: Any) -> Dict[str, Any]:
    """`pipeline run --config CONFIG [--data DATA] [--out OUT] [--flag value ...]` in this process (progress bars
    as in the terminal), returning the contents of its `results.json`. Keyword arguments are the command's
    flags (`top_n=50`, `precision="bf16"`, `limit_queries=5`). A failure raises the CLI's message."""
    argv = ["skillret", "run", "--config", os.fspath(config)]
    if data is not None:
        argv += ["--data", os.fspath(data)]
    if out is not None:
        argv += ["--out", os.fspath(out)]
    argv += _flags(overrides)
    _skillret.cli(argv, raise_errors=True)
    directory = Path(_skillret.run_dir(os.fspath(config), None if data is None else os.fspath(data), None if out is None else os.fspath(out)))
    return json.loads((directory / "results.json").read_text())


def sweep(configs: _PathLike, out: _PathLike, data: Optional[_PathLike] = None, **overrides: Any) -> Dict[str, Dict[str, Any]]:
    """`pipeline sweep --configs CONFIGS --out OUT [--data DATA] [--flag value ...]` in this process, returning each
    job's `results.json` by job name (the directories under `OUT/runs`)."""
    argv = ["skillret", "sweep", "--configs", os.fspath(configs), "--out", os.fspath(out)]
    if data is not None:
        argv += ["--data", os.fspath(data)]
    argv += _flags(overrides)
    _skillret.cli(argv, raise_errors=True)
    runs = Path(out) / "runs"
    return {
        job.name: json.loads((job / "results.json").read_text())
        for job in sorted(runs.iterdir())
        if (job / "results.json").is_file()
    }


def main() -> None:
    """The `skillret` console script: the `pipeline` command line (`skillret run --config ...`)."""
    sys.exit(_skillret.cli(["skillret"] + sys.argv[1:]))
