#!/usr/bin/env python3
"""Build TEST embedders and rerankers saved with sentence-transformers 6.3's `message` modality.

THEIR OUTPUTS MEAN NOTHING: the random weights of the TEST Qwen3 and Gemma3 embedders, with a
chat template beside them, as sentence-transformers 6.3 saves a model whose tokenizer has
one (its `sentence_bert_config.json` then lists the `message` modality, and every plain string
is rendered through the template before it is tokenised):

- models/test-qwen3-chat: models/test-qwen3-embedding (scripts/make_qwen3_models.py) with
  Qwen3's own chat template (models/qwen3-tokenizer's tokenizer_config.json, written to
  chat_template.jinja as transformers 5 saves it) and `"format": "flat"` (what
  sentence-transformers infers for that template); its prompts are Qwen3-Embedding's.
- models/test-gemma3-chat: models/test-gemma3-embedding (scripts/make_registry_models.py) with
  Gemma 3's chat template (google/gemma-3-4b-it's: a system message becomes a prefix of the
  first user turn, contents are typed parts and trimmed) and `"format": "structured"` (what
  sentence-transformers infers: the template reads `'type'`); prompts in EmbeddingGemma's
  style. Its tokenizer is the Qwen3 one of the TEST Gemma3 model, so the turn markers
  tokenise as plain text.
- models/test-bert-cross-encoder-chat: models/test-bert-cross-encoder (scripts/make_cross_encoders.py)
  saved as sentence-transformers 6.3's `CrossEncoder` saves a sequence-classification model whose
  tokenizer has a chat template: a (query, document) pair becomes a `query` and a `document`
  message, the template ([CLS], the prompt, `query: …[SEP]document: …[SEP]`) writes both, and a
  default prompt (`rank`) becomes a system message.
- models/test-qwen3-reranker-chat: models/test-qwen3-reranker (scripts/make_qwen3_models.py) saved
  as `CrossEncoder` saves a causal LM (`Transformer` for text generation, then `LogitScore`:
  logit("yes") - logit("no") at the last position), with a Qwen3-Reranker template that takes the
  instruction from the system message (its default prompt is the SkillRet instruction).
- models/test-qwen3-raw-chat: models/test-qwen3-embedding as a plain Hugging Face checkpoint (no
  sentence-transformers files) with Qwen3's chat template beside its tokenizer: sentence-transformers
  6.3 infers the `message` modality for it (and mean pooling).

Standard library only and byte-stable: files are copied and written, nothing is drawn. The
fixture that checks them against sentence-transformers 6.3 is scripts/make_chat_fixture.py.
Idempotent (a folder that exists is left alone; delete it to rebuild).

    python3 scripts/make_chat_models.py [--models models]
"""

import argparse
import json
import os
import shutil
import sys

GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)

# A pair template for a BERT cross-encoder: sentence-transformers 6.3 maps a pair to a `query`
# and a `document` message (and a prompt to a system message before them).
BERT_PAIR_TEMPLATE = (
    "{{ cls_token }}{% for m in messages %}{% if m.role == 'system' %}{{ m.content }} {% endif %}{% endfor %}"
    "query: {{ messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first }}{{ sep_token }}"
    "document: {{ messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first }}{{ sep_token }}"
)

# Qwen3-Reranker's input as a pair template: the instruction is the system message (the prompt).
QWEN3_RERANKER_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
    "<Instruct>: {{ messages | selectattr('role', 'eq', 'system') | map(attribute='content') | first }}\n"
    "<Query>: {{ messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first }}\n"
    "<Document>: {{ messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first }}"
    # An expression: Jinja drops the last newline of a template's text (keep_trailing_newline is off).
    "{{ '<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}"
)

SKILLRET_INSTRUCTION = (
    "Given a skill search query, judge whether the skill document is relevant and useful for the query"
)

GEMMA3_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: "}


def sentence_bert_config(fmt, task="feature-extraction"):
    """What sentence-transformers 6.3 writes for a Transformer module of `task` that takes messages."""
    output, module_output = {
        "feature-extraction": ("last_hidden_state", "token_embeddings"),
        "sequence-classification": ("logits", "scores"),
        "text-generation": ("logits", "causal_logits"),
    }[task]
    return {
        "transformer_task": task,
        "modality_config": {
            "text": {"method": "forward", "method_output_name": output},
            "message": {"method": "forward", "method_output_name": output, "format": fmt},
        },
        "module_output_name": module_output,
    }


def cross_encoder_files(task, prompts, logit_score=None):
    """The files sentence-transformers 6.3's CrossEncoder.save writes besides the checkpoint."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"}]
    files = {}
    if logit_score is not None:
        modules.append({
            "idx": 1, "name": "1", "path": "1_LogitScore",
            "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore",
        })
        true_id, false_id = logit_score
        files["1_LogitScore/config.json"] = {
            "true_token_id": true_id, "false_token_id": false_id, "module_input_name": "causal_logits",
        }
    files["modules.json"] = modules
    files["config_sentence_transformers.json"] = {
        "activation_fn": "torch.nn.modules.activation.Sigmoid",
        "default_prompt_name": next(iter(prompts)),
        "model_type": "CrossEncoder",
        "prompts": prompts,
    }
    return files


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=4, ensure_ascii=False)
        f.write("\n")


def build(models, source, target, template, fmt, prompts=None, task="feature-extraction", files=None):
    src, dst = os.path.join(models, source), os.path.join(models, target)
    if os.path.isdir(dst):
        print(f"{dst}: already there")
        return
    if not os.path.isfile(os.path.join(src, "model.safetensors")):
        sys.exit(
            f"{src}: missing; run scripts/make_cross_encoders.py, scripts/make_qwen3_models.py and "
            "scripts/make_registry_models.py first"
        )
    tmp = dst + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    with open(os.path.join(tmp, "chat_template.jinja"), "w") as f:
        f.write(template)
    write_json(os.path.join(tmp, "sentence_bert_config.json"), sentence_bert_config(fmt, task))
    for name, value in (files or {}).items():
        os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
        write_json(os.path.join(tmp, name), value)
    if prompts is not None:
        path = os.path.join(tmp, "config_sentence_transformers.json")
        config = json.load(open(path))
        config["prompts"] = prompts
        write_json(path, config)
    with open(os.path.join(tmp, "README.md"), "w") as f:
        f.write(
            f"# {target}\n\nTEST model: random weights, outputs mean nothing. {source} with a chat template "
            f"and sentence-transformers 6.3's `message` modality (format `{fmt}`); built by "
            "scripts/make_chat_models.py.\n"
        )
    os.rename(tmp, dst)
    print(f"{dst}: built")


def build_raw(models, source, target, template):
    """A plain checkpoint (config, weights, tokenizer) with a chat template, no sentence-transformers files."""
    src, dst = os.path.join(models, source), os.path.join(models, target)
    if os.path.isdir(dst):
        print(f"{dst}: already there")
        return
    tmp = dst + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(src, name), os.path.join(tmp, name))
    with open(os.path.join(tmp, "chat_template.jinja"), "w") as f:
        f.write(template)
    with open(os.path.join(tmp, "README.md"), "w") as f:
        f.write(
            f"# {target}\n\nTEST model: random weights, outputs mean nothing. {source}'s checkpoint without "
            "sentence-transformers files, with a chat template; built by scripts/make_chat_models.py.\n"
        )
    os.rename(tmp, dst)
    print(f"{dst}: built")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))
    args = ap.parse_args()
    qwen3_config = os.path.join(args.models, "qwen3-tokenizer", "tokenizer_config.json")
    if not os.path.isfile(qwen3_config):
        sys.exit(f"{qwen3_config}: missing; run scripts/fetch-models.sh qwen3-tokenizer first")
    qwen3_template = json.load(open(qwen3_config))["chat_template"]
    build(args.models, "test-qwen3-embedding", "test-qwen3-chat", qwen3_template, "flat")
    build_raw(args.models, "test-qwen3-embedding", "test-qwen3-raw-chat", qwen3_template)
    build(args.models, "test-gemma3-embedding", "test-gemma3-chat", GEMMA3_TEMPLATE, "structured", GEMMA3_PROMPTS)
    build(
        args.models, "test-bert-cross-encoder", "test-bert-cross-encoder-chat", BERT_PAIR_TEMPLATE, "flat",
        task="sequence-classification",
        files=cross_encoder_files("sequence-classification", {"rank": "Rank the skill for the request."}),
    )
    vocab = json.load(open(os.path.join(args.models, "qwen3-tokenizer", "tokenizer.json")))["model"]["vocab"]
    build(
        args.models, "test-qwen3-reranker", "test-qwen3-reranker-chat", QWEN3_RERANKER_TEMPLATE, "flat",
        task="text-generation",
        files=cross_encoder_files(
            "text-generation", {"skillret": SKILLRET_INSTRUCTION}, logit_score=(vocab["yes"], vocab["no"])
        ),
    )


if __name__ == "__main__":
    main()
