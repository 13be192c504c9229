"""The skillret package against its references: sentence-transformers (vectors, cross-encoder scores),
pytrec_eval and the official outputs (metrics), `pipeline embed` (the same bits), the GIL released during
inference, and errors as Python exceptions with the CLI's messages.

Models: scripts/fetch-models.sh (all-MiniLM-L6-v2), scripts/make_cross_encoders.py and
scripts/make_chat_models.py (TEST models). Data: ../shared/skillret-sample (read, never copied).
A test whose model, data or reference library is absent skips, saying what to run.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import skillret

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "models"
SAMPLE = ROOT.parent / "shared" / "skillret-sample"
TEXTS = [
    "hello world",
    "Merge the quarterly tables of two PDF reports and check the totals",
    "A skill that backs up a PostgreSQL database and restores it on demand",
]


def model(name, how="scripts/fetch-models.sh"):
    path = MODELS / name
    if not (path / "config.json").is_file():
        pytest.skip(f"{path} is absent: run {how}")
    return str(path)


def sample():
    if not (SAMPLE / "qrels" / "test.jsonl").is_file():
        pytest.skip(f"{SAMPLE} is absent")
    return SAMPLE


def cosines(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def test_vectors_equal_sentence_transformers():
    st = pytest.importorskip("sentence_transformers")
    path = model("all-MiniLM-L6-v2")
    ours = skillret.Embedder(path)
    theirs = st.SentenceTransformer(path, device="cpu")
    for kind in ["query", "document"]:
        a = getattr(ours, f"encode_{kind}")(TEXTS)
        b = theirs.encode(TEXTS, convert_to_numpy=True)
        assert a.dtype == np.float32 and a.shape == (len(TEXTS), 384)
        assert cosines(a, b).min() >= 0.99999
    one = ours.encode(TEXTS[0])
    assert one.shape == (384,)
    np.testing.assert_array_equal(one, ours.encode(TEXTS)[0])
    sims = ours.similarity(ours.encode(TEXTS), ours.encode(TEXTS[:1]))
    assert sims.shape == (3, 1) and abs(sims[0, 0] - 1.0) < 1e-6


def test_prompts_follow_the_model_files():
    path = model("multilingual-e5-small")
    e5 = skillret.Embedder(path)
    # e5's files name no prompts: a literal prompt is the text before the input.
    a = e5.encode(["merge two PDF reports"], prompt="query: ")
    b = e5.encode(["query: merge two PDF reports"])
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="prompt_name"):
        e5.encode(["x"], prompt_name="no-such-prompt")


def test_vectors_are_the_bits_of_pipeline_embed(tmp_path):
    binary = os.environ.get("SKILLRET_PIPELINE") or shutil.which("pipeline")
    if not binary:
        pytest.skip("set SKILLRET_PIPELINE to the pipeline binary (target/release/pipeline)")
    path = model("all-MiniLM-L6-v2")
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps(t) + "\n" for t in TEXTS))
    out = tmp_path / "v.jsonl"
    subprocess.run(
        [binary, "embed", "--model", path, "--kind", "query", "--input", str(texts), "--output", str(out)],
        check=True,
        capture_output=True,
    )
    cli = np.array([json.loads(line) for line in out.read_text().splitlines()], dtype=np.float32)
    np.testing.assert_array_equal(skillret.Embedder(path).encode_query(TEXTS), cli)


def read_qrels(path):
    qrels = {}
    for line in open(path):
        r = json.loads(line)
        qrels.setdefault(r["query_id"], {})[r["skill_id"]] = int(r["relevance"])
    return qrels


def read_run(path):
    run = {}
    for line in open(path):
        q, _, doc, _, score, _ = line.split()
        run.setdefault(q, {})[doc] = float(score)
    return run


def test_evaluate_equals_pytrec_eval_and_the_official_outputs():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    data = sample()
    qrels = read_qrels(data / "qrels" / "test.jsonl")
    for name in ["minilm", "bm25", "e5"]:
        run = read_run(data / "reference" / f"{name}.run.trec")
        ours = skillret.evaluate(qrels, run, per_query=True)
        official = json.loads((data / "reference" / f"{name}.metrics.json").read_text())
        for key, value in official.items():
            if key in ours:
                assert ours[key] == pytest.approx(value, abs=1e-12), (name, key)
        # Per query, to the last bit pytrec_eval prints.
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5,10,15", "recall.5,10,15", "recip_rank"})
        theirs = evaluator.evaluate(run)
        assert ours["queries"] == len(theirs) == 24
        for q, row in theirs.items():
            for k in [5, 10, 15]:
                assert ours["per_query"][q][f"NDCG@{k}"] == row[f"ndcg_cut_{k}"], (name, q, k)
                assert ours["per_query"][q][f"Recall@{k}"] == row[f"recall_{k}"], (name, q, k)
            assert ours["per_query"][q]["MRR"] == row["recip_rank"], (name, q)
    # Paths work as dicts do; `metrics` keeps the named ones.
    by_path = skillret.evaluate(
        str(data / "qrels" / "test.jsonl"), str(data / "reference" / "minilm.run.trec"), metrics=["NDCG"]
    )
    assert set(by_path) == {"NDCG@5", "NDCG@10", "NDCG@15", "queries"}
    assert by_path["NDCG@10"] == skillret.evaluate(qrels, read_run(data / "reference" / "minilm.run.trec"))["NDCG@10"]


def test_cross_encoder_with_a_chat_template_scores_as_sentence_transformers_6_3():
    path = model("test-bert-cross-encoder-chat", "scripts/make_chat_models.py")
    reference = json.loads((ROOT / "crates/reranker/tests/data/chat_reference.json").read_text())
    cases = reference["models"]["test-bert-cross-encoder-chat"]
    ce = skillret.CrossEncoder(path, max_length=cases["max_length"])
    pairs = [(c["query"], c["document"]) for c in cases["cases"]]
    np.testing.assert_allclose(ce.predict(pairs), [c["logit"] for c in cases["cases"]], atol=1e-4)
    np.testing.assert_allclose(
        ce.predict(pairs, activation_fn="sigmoid"), [c["score"] for c in cases["cases"]], atol=1e-5
    )
    ranked = ce.rank(pairs[0][0], [d for _, d in pairs], top_k=2, return_documents=True)
    scores = ce.predict([(pairs[0][0], d) for _, d in pairs])
    assert [r["corpus_id"] for r in ranked] == list(np.argsort(-scores, kind="stable")[:2])
    assert ranked[0]["text"] == pairs[ranked[0]["corpus_id"]][1]


def test_inference_releases_the_gil():
    path = model("all-MiniLM-L6-v2")
    m = skillret.Embedder(path)
    texts = [f"{TEXTS[1]} {i}" for i in range(400)]
    done = threading.Event()

    def work():
        m.encode(texts)
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    # Python keeps running while the engine embeds: with the GIL held this loop would not
    # advance until the worker ended.
    spins = 0
    while not done.is_set():
        spins += 1
    worker.join()
    assert spins > 1000, spins


def test_errors_are_python_exceptions_with_the_cli_messages(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        skillret.Embedder(str(tmp_path / "absent"))
    path = Path(model("all-MiniLM-L6-v2"))
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    (broken / "config_sentence_transformers.json").write_text('{"prompts": {"query": 3}}')
    with pytest.raises(ValueError, match=str(broken / "config_sentence_transformers.json")):
        skillret.Embedder(str(broken))
    with pytest.raises(ValueError, match="precision"):
        skillret.Embedder(str(path), precision="f16")
    with pytest.raises(FileNotFoundError):
        skillret.evaluate(str(tmp_path / "no-qrels.jsonl"), {"q": {"d": 1.0}})


def test_run_returns_what_pipeline_run_writes(tmp_path, monkeypatch):
    model("all-MiniLM-L6-v2")
    monkeypatch.chdir(ROOT)
    results = skillret.run("configs/minilm.toml", out=tmp_path / "py", limit_queries=3)
    written = json.loads((tmp_path / "py" / "results.json").read_text())
    assert results == written
    assert results["scores"]["retriever"]["queries"] == 3
    binary = os.environ.get("SKILLRET_PIPELINE")
    if binary:
        subprocess.run(
            [binary, "run", "--config", "configs/minilm.toml", "--out", str(tmp_path / "cli"), "--limit-queries", "3"],
            check=True,
            capture_output=True,
        )
        cli = json.loads((tmp_path / "cli" / "results.json").read_text())
        assert cli["scores"] == results["scores"]
    # The retriever's NDCG@10 equals evaluate's on the run it wrote.
    ours = skillret.evaluate(
        str(ROOT / "tests/fixtures/tiny/qrels/test.jsonl"), str(tmp_path / "py" / "run.retriever.trec")
    )
    assert ours["queries"] == 3
    assert ours["NDCG@10"] == results["scores"]["retriever"]["NDCG@10"]
    with pytest.raises(FileNotFoundError, match="no-such.toml"):
        skillret.run(tmp_path / "no-such.toml")
    with pytest.raises(ValueError, match="limit-queries"):
        skillret.run("configs/minilm.toml", out=tmp_path / "bad", limit_queries=0)


def test_the_console_script_is_the_cli(tmp_path):
    script = Path(sys.executable).parent / "skillret"
    if not script.is_file():
        pytest.skip("the skillret console script is not installed beside this Python")
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "run" in out.stdout and "sweep" in out.stdout
    bad = subprocess.run([str(script), "run", "--config", str(tmp_path / "absent.toml")], capture_output=True, text=True)
    assert bad.returncode == 1 and "error:" in bad.stderr and "absent.toml" in bad.stderr


def test_an_mteb_retrieval_task_on_the_sample_scores_as_pipeline_run(tmp_path, monkeypatch):
    mteb = pytest.importorskip("mteb")
    import skillret.mteb

    data = sample()
    path = model("all-MiniLM-L6-v2")
    encoder = skillret.mteb.model(path)
    assert encoder.mteb_model_meta.embed_dim == 384
    result = mteb.evaluate(encoder, skillret.mteb.skillret_task(str(data)), cache=None)
    scores = result.task_results[0].scores["test"][0]
    ndcg = scores["ndcg_at_10"]
    assert scores["main_score"] == ndcg
    # MTEB rounds its scores to 5 decimals.
    official = json.loads((data / "reference" / "minilm.metrics.json").read_text())
    assert ndcg == round(official["NDCG@10"], 5)
    binary = os.environ.get("SKILLRET_PIPELINE")
    if binary:
        # pipeline run on the same data gives the same NDCG@10; shown on a slice of the library (every
        # gold skill and every eighth of the others, in a data directory of its own), which embeds a
        # fifth of what the whole sample would.
        gold = {json.loads(line)["skill_id"] for line in (data / "qrels" / "test.jsonl").read_text().splitlines() if line}
        skills = [line for line in (data / "skills" / "test.jsonl").read_text().splitlines() if line]
        kept = [line for i, line in enumerate(skills) if i % 8 == 0 or json.loads(line)["id"] in gold]
        sliced = tmp_path / "slice"
        for part in ("queries", "qrels"):
            (sliced / part).mkdir(parents=True)
            (sliced / part / "test.jsonl").write_text((data / part / "test.jsonl").read_text())
        (sliced / "skills").mkdir()
        (sliced / "skills" / "test.jsonl").write_text("\n".join(kept) + "\n")
        result = mteb.evaluate(encoder, skillret.mteb.skillret_task(str(sliced), name="SkillRetSlice"), cache=None)
        on_slice = result.task_results[0].scores["test"][0]["ndcg_at_10"]
        monkeypatch.chdir(ROOT)
        subprocess.run(
            [binary, "run", "--config", "configs/minilm.toml", "--data", str(sliced), "--out", str(tmp_path / "run")],
            check=True,
            capture_output=True,
        )
        ours = json.loads((tmp_path / "run" / "results.json").read_text())["scores"]["retriever"]["NDCG@10"]
        assert on_slice == round(ours, 5)
        assert len(kept) < len(skills) / 4


def test_inputs_beyond_one_engine_call_keep_their_bits():
    # Embedder.encode hands the engine 256 texts at a time (Ctrl-C is seen between two calls).
    m = skillret.Embedder(model("all-MiniLM-L6-v2"))
    texts = [f"skill {i}: {TEXTS[i % 3]}" for i in range(600)]
    all_at_once = m.encode(texts)
    assert all_at_once.shape == (600, 384)
    np.testing.assert_array_equal(all_at_once[250:], m.encode(texts[250:]))
    np.testing.assert_array_equal(all_at_once[:3], m.encode(texts[:3]))


def test_sweep_returns_each_jobs_results(tmp_path, monkeypatch):
    model("all-MiniLM-L6-v2")
    monkeypatch.chdir(ROOT)
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ["minilm.toml", "bm25.toml"]:
        shutil.copy(ROOT / "configs" / name, configs / name)
    results = skillret.sweep(str(configs / "*.toml"), tmp_path / "sweep", limit_queries=3)
    assert sorted(results) == sorted(p.name for p in (tmp_path / "sweep" / "runs").iterdir() if (p / "results.json").is_file())
    assert len(results) == 2
    for job in results.values():
        assert job["scores"]["retriever"]["queries"] == 3


def test_a_yes_no_reranker_saved_with_logit_score_scores_as_sentence_transformers_6_3():
    path = model("test-qwen3-reranker-chat", "scripts/make_qwen3_models.py && scripts/make_chat_models.py")
    reference = json.loads((ROOT / "crates/reranker/tests/data/chat_reference.json").read_text())
    cases = reference["models"]["test-qwen3-reranker-chat"]
    ce = skillret.CrossEncoder(path, max_length=cases["max_length"])
    pairs = [(c["query"], c["document"]) for c in cases["cases"]]
    # A yes/no reranker's score is P(yes), sentence-transformers' sigmoid of logit(yes) - logit(no).
    np.testing.assert_allclose(ce.predict(pairs, show_progress_bar=True), [c["score"] for c in cases["cases"]], atol=1e-5)
    with pytest.raises(ValueError, match="already P"):
        ce.predict(pairs, activation_fn="sigmoid")


def test_evaluate_reads_a_data_directory_and_progress_bars_change_nothing():
    data = sample()
    by_dir = skillret.evaluate(str(data), str(data / "reference" / "minilm.run.trec"))
    by_file = skillret.evaluate(str(data / "qrels" / "test.jsonl"), str(data / "reference" / "minilm.run.trec"))
    assert by_dir == by_file
    m = skillret.Embedder(model("all-MiniLM-L6-v2"))
    np.testing.assert_array_equal(m.encode(TEXTS, show_progress_bar=True), m.encode(TEXTS))
    np.testing.assert_array_equal(m.encode_query(TEXTS, show_progress_bar=True), m.encode_query(TEXTS))
