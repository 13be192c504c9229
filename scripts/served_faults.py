#!/usr/bin/env python3
"""What a user sees when served models fail, with real vLLM servers on this machine.

Each scenario runs `pipeline run` (the release binary) with all-MiniLM-L6-v2 served by
vLLM (scripts/vllm.sh) on the shared SkillRet sample and prints the messages the user
sees (the lines of stderr that say what happened) and the outcome:

  replicas     two replicas, one killed mid-run: metrics identical to one replica
  both-down    both killed mid-run: the error names both; the rerun, after a restart,
               resumes from the cache and ends identical
  restart      one server restarted mid-run (killed, started again): the run waits
               (retries = 10) and ends identical
  timeout      the server stops answering (SIGSTOP): timeout, then the error
  refused      nothing listens on the port: the error at the start
  key          vLLM started with --api-key; the run sends another key: 401, naming the
               variable, never the key
  other-model  another model (multilingual-e5-small, also 384-d, max 256 tokens) served
               under the cached name from a directory of the same name: the probe
               check refuses the cached vectors

Needs: cargo build --release -p pipeline; scripts/fetch-models.sh; scripts/vllm.sh install.
Uses ports 8011, 8015 and 8016 (stops what this script starts there). About 25 minutes
on 2 cores (each vLLM start takes 90-140 s).

    python3 scripts/served_faults.py [--data ../shared/skillret-sample] [--only replicas,key]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "target" / "release" / "pipeline"
VLLM = ROOT / "scripts" / "vllm.sh"
MINILM = ROOT / "models" / "all-MiniLM-L6-v2"
E5 = ROOT / "models" / "multilingual-e5-small"


def vllm(*args, check=True):
    r = subprocess.run([str(VLLM), *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"scripts/vllm.sh {' '.join(map(str, args))} failed:\n{r.stdout}{r.stderr}")
    return r


def start(port, model=MINILM, name="all-MiniLM-L6-v2", extra=()):
    t = time.time()
    r = vllm("start", model, name, port, *(["--", *extra] if extra else []), check=False)
    if r.returncode != 0:
        print(f"  (vLLM on {port} did not start: {r.stderr.strip()})", flush=True)
        raise SystemExit(1)
    print(f"  (vLLM on {port} ready in {time.time() - t:.0f} s)", flush=True)


def pid(port):
    path = ROOT / ".cache" / "vllm" / f"{port}.pid"
    return int(path.read_text()) if path.exists() else None


def kill(port, sig=signal.SIGKILL):
    p = pid(port)
    if p:
        os.killpg(p, sig)


def config(tmp, name, endpoints, extra=""):
    text = f"""[data]
dir = "{DATA}"

[embedder]
backend = "openai"
served_model = "all-MiniLM-L6-v2"
endpoints = {json.dumps([f"http://127.0.0.1:{p}/v1" for p in endpoints])}
model = "{MINILM}"
max_in_flight = 4
batch_size = 32
{extra}

[retriever]
kind = "dense"

[output]
cache = "{tmp / 'cache'}"
"""
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


def run(cfg, out, env=None, during=None, after_s=None):
    """Runs `pipeline run`; `during` is called after `after_s` seconds."""
    proc = subprocess.Popen(
        [str(PIPELINE), "run", "--config", str(cfg), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if during:
        timer = threading.Timer(after_s, during)
        timer.start()
    stdout, stderr = proc.communicate()
    return proc.returncode, stderr


def said(stderr):
    """What the run told the user (stderr: summaries, warnings, the error; the
    progress bars are hidden when stderr is not a terminal)."""
    for line in stderr.splitlines():
        if line.strip():
            print("    " + line.rstrip())


def metrics(out):
    return json.loads((out / "metrics.json").read_text())


def scenario(title):
    print(f"\n## {title}\n", flush=True)


def main():
    global DATA
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "skillret-sample"))
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    DATA = Path(args.data).resolve()
    only = set(filter(None, args.only.split(",")))
    want = lambda s: not only or s in only
    for port in (8011, 8015, 8016):
        vllm("stop", port, check=False)
    tmp = Path(tempfile.mkdtemp(prefix="served-faults-"))
    print(f"# Served-model faults against real vLLM ({DATA}; work in {tmp})", flush=True)
    start(8011)

    # The reference: one replica.
    ref_cfg = config(tmp, "one", [8011])
    code, err = run(ref_cfg, tmp / "one")
    assert code == 0, err
    reference = metrics(tmp / "one")
    print(f"reference run (one replica): NDCG@10 {reference['retriever']['NDCG@10']:.4f}")

    if want("replicas") or want("both-down"):
        start(8015)
    if want("replicas"):
        scenario("replicas: two replicas, one killed mid-run")
        shutil.rmtree(tmp / "cache")
        cfg = config(tmp, "two", [8011, 8015])
        code, err = run(cfg, tmp / "two", during=lambda: kill(8015), after_s=40)
        said(err)
        print(f"  exit {code}; metrics identical to one replica: {code == 0 and metrics(tmp / 'two') == reference}")
        vllm("stop", 8015, check=False)
        start(8015)

    if want("both-down"):
        scenario("both-down: both replicas killed mid-run, then restarted and the run repeated")
        shutil.rmtree(tmp / "cache", ignore_errors=True)
        cfg = config(tmp, "both", [8011, 8015])
        code, err = run(cfg, tmp / "both", during=lambda: (kill(8011), kill(8015)), after_s=40)
        said(err)
        print(f"  exit {code}; metrics.json written: {(tmp / 'both' / 'metrics.json').exists()}")
        vllm("stop", 8011, check=False)
        vllm("stop", 8015, check=False)
        start(8011)
        start(8015)
        code, err = run(cfg, tmp / "both")
        said(err)
        print(f"  rerun exit {code}; identical to one replica: {code == 0 and metrics(tmp / 'both') == reference}")
        vllm("stop", 8015, check=False)

    if want("restart"):
        scenario("restart: the server restarted mid-run (retries = 10)")
        shutil.rmtree(tmp / "cache", ignore_errors=True)
        cfg = config(tmp, "restart", [8011], "retries = 10")

        def restart():
            kill(8011)
            time.sleep(2)
            vllm("stop", 8011, check=False)
            threading.Thread(target=start, args=(8011,)).start()

        code, err = run(cfg, tmp / "restart", during=restart, after_s=30)
        said(err)
        time.sleep(1)
        print(f"  exit {code}; identical to one replica: {code == 0 and metrics(tmp / 'restart') == reference}")
        while vllm("status", 8011, check=False).returncode != 0:
            time.sleep(2)

    if want("timeout"):
        scenario("timeout: the server stops answering (SIGSTOP), timeout_s = 10, retries = 1")
        shutil.rmtree(tmp / "cache", ignore_errors=True)
        cfg = config(tmp, "timeout", [8011], "timeout_s = 10\nretries = 1")
        code, err = run(cfg, tmp / "timeout", during=lambda: kill(8011, signal.SIGSTOP), after_s=20)
        said(err)
        print(f"  exit {code}")
        kill(8011, signal.SIGCONT)
        time.sleep(5)

    if want("refused"):
        scenario("refused: nothing listens on the port")
        cfg = config(tmp, "refused", [8016])
        code, err = run(cfg, tmp / "refused")
        said(err)
        print(f"  exit {code}")

    if want("key"):
        scenario("key: vLLM with --api-key, the run sends another key")
        start(8016, extra=("--api-key", "the-server-key"))
        cfg = config(tmp, "key", [8016], 'api_key_env = "SKILLRET_DEMO_KEY"')
        code, err = run(cfg, tmp / "key", env={"SKILLRET_DEMO_KEY": "sk-demo-wrong-key"})
        said(err)
        print(f"  exit {code}; the key appears in the message: {'sk-demo-wrong-key' in err}")
        code, err = run(cfg, tmp / "key-right", env={"SKILLRET_DEMO_KEY": "the-server-key"})
        print(f"  with the right key: exit {code}")
        vllm("stop", 8016, check=False)

    if want("other-model"):
        scenario("other-model: another model served under the cached name")
        # The reference run's cache holds MiniLM's vectors under this protocol.
        shutil.rmtree(tmp / "cache", ignore_errors=True)
        code, err = run(ref_cfg, tmp / "one")
        assert code == 0, err
        vllm("stop", 8011, check=False)
        disguise = tmp / "disguise" / "all-MiniLM-L6-v2"
        shutil.copytree(E5, disguise)
        start(8011, model=disguise, extra=("--max-model-len", "256"))
        code, err = run(ref_cfg, tmp / "other")
        said(err)
        print(f"  exit {code}; outputs written: {(tmp / 'other').exists()}")
        vllm("stop", 8011, check=False)
        start(8011)

    for port in (8015, 8016):
        vllm("stop", port, check=False)
    print(f"\n(work directory {tmp})")


if __name__ == "__main__":
    main()
