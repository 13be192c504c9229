"""PyTorch on the CPU in its fast mode, for the benchmarks that race it (bench_precision.py, bench_qwen3.py).

PyTorch bf16 on an Intel Xeon with AMX was bimodal (issue 63): the Qwen3-0.6B shape at 512 tokens ran
524-651 tokens/s in some processes and 996-1,189 in others, by how the model had been loaded. Neither
the matmuls nor attention's kernels change between the two (torch.profiler: the same oneDNN AMX products);
the time goes to page faults. glibc's malloc serves every block above its mmap threshold with fresh
pages from the kernel and hands them back when the tensor is freed, so each of a pass's large
activations (a [16, 512, 16, 128] f32 tensor is 64 MiB) is faulted in page by page, every layer, every
pass: `perf stat -e page-faults` counted 26-31 million faults for five passes. The threshold moves with
the heap's history (glibc raises it, up to 32 MiB, each time a mapped block is freed), which is why the
way the model was loaded decided the mode. Measured on one Xeon with AMX, 2 threads, 16 x 512 tokens,
best of three after a warm-up, one process each (`/tmp` scratch of issue 63's session):

    glibc malloc as it is            585-843 tokens/s   26.4-30.8 M page faults
    jemalloc (LD_PRELOAD)            491-506            37.8-38.6 M (it returns freed pages too)
    glibc, mmap_max=0 (tunables)   1,018-1,092           0.4-1.3 M
    tcmalloc (LD_PRELOAD)          1,116-1,187           0.4-1.0 M

So the anchor is PyTorch with tcmalloc preloaded, as PyTorch's own launcher for Xeons does
(`python -m torch.backends.xeon.run_cpu` preloads tcmalloc or jemalloc where it finds them): Debian's
`libtcmalloc-minimal4` (`apt-get install libtcmalloc-minimal4`). Without it, glibc's tunables keep
every block on the heap (`glibc.malloc.mmap_max=0`, and a trim threshold that never gives memory
back), 8% slower than tcmalloc on the work above. bench_precision.py prefers it: with tcmalloc preloaded, its
ONNX Runtime side aborted (`munmap_chunk(): invalid pointer`, a block freed by the other allocator than the
one that gave it). The allocator must be chosen before the process starts, so `fast_allocator` re-executes the
script with it; our `pipeline` runs as it ships (its environment without what was added here).
"""

import os
import sys
from pathlib import Path

# Marks a process already re-executed with its allocator (the mode's name).
_MARK = "SKILLRET_BENCH_ALLOCATOR"
_TCMALLOC = [
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
    "/usr/lib64/libtcmalloc_minimal.so.4",
    "/usr/lib64/libtcmalloc.so.4",
]
_GLIBC_TUNED = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
MODES = ["auto", "tcmalloc", "glibc-tuned", "glibc"]
# What this module adds to the environment, and the values they had before (None: unset).
_ADDED = ["LD_PRELOAD", "GLIBC_TUNABLES"]


def _tcmalloc():
    return next((p for p in _TCMALLOC if Path(p).exists()), None)


def fast_allocator(mode="auto", prefer="tcmalloc"):
    """Re-executes this script (before torch is imported) with the allocator of `mode`, once; returns the words
    that say which one PyTorch runs with. auto: `prefer` (tcmalloc where it is installed, else glibc-tuned);
    glibc: as it is (the slow, history-dependent mode, for comparison)."""
    if mode not in MODES:
        sys.exit(f"--torch-allocator: {mode!r} is not one of {', '.join(MODES)}")
    done = os.environ.get(_MARK)
    if done is None:
        if mode == "auto":
            mode = "tcmalloc" if prefer == "tcmalloc" and _tcmalloc() else "glibc-tuned"
        env = dict(os.environ)
        for key in _ADDED:
            env[f"{_MARK}_SAVED_{key}"] = "unset" if key not in env else "set:" + env[key]
        if mode == "tcmalloc":
            lib = _tcmalloc()
            if lib is None:
                sys.exit("--torch-allocator tcmalloc: no libtcmalloc found (apt-get install libtcmalloc-minimal4)")
            env["LD_PRELOAD"] = ":".join(filter(None, [lib, env.get("LD_PRELOAD")]))
        elif mode == "glibc-tuned":
            env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), _GLIBC_TUNED]))
        env[_MARK] = mode
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    words = {
        "tcmalloc": f"tcmalloc (LD_PRELOAD={_tcmalloc()})",
        "glibc-tuned": f"glibc malloc with GLIBC_TUNABLES={_GLIBC_TUNED}",
        "glibc": "glibc malloc as it is (slow and history-dependent: see scripts/bench_anchor.py)",
    }
    return words[done]


def ours_env(extra=None):
    """The environment for our binaries: this process's, without what `fast_allocator` added."""
    env = dict(os.environ)
    for key in _ADDED:
        saved = env.pop(f"{_MARK}_SAVED_{key}", None)
        if saved is None:
            continue
        if saved.startswith("set:"):
            env[key] = saved[len("set:"):]
        else:
            env.pop(key, None)
    env.pop(_MARK, None)
    env.update(extra or {})
    return env


def alternate(sides, repeat, warm=()):
    """Runs `sides` ({label: fn() -> (seconds or None, result)}) round after round, `repeat` rounds, after one
    untimed warm-up call of each side named in `warm` (the in-process engines: a process of our binary
    starts cold each time and times itself without the model's loading); a side's fn may time itself
    (its first value) or leave it to this (None). Returns {label: (best seconds, every time, last result)}."""
    import time

    times = {label: [] for label in sides}
    last = {}
    for label in warm:
        sides[label]()
    for _ in range(repeat):
        for label, fn in sides.items():
            t0 = time.perf_counter()
            own, result = fn()
            times[label].append(own if own is not None else time.perf_counter() - t0)
            last[label] = result
    return {label: (min(ts), ts, last[label]) for label, ts in times.items()}
