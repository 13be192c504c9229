#!/usr/bin/env python3
"""Build two TEST embedders saved with sentence-transformers 6.3's `message` modality.

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

GEMMA3_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: "}


def sentence_bert_config(fmt):
    return {
        "transformer_task": "feature-extraction",
        "modality_config": {
            "text": {"method": "forward", "method_output_name": "last_hidden_state"},
            "message": {"method": "forward", "method_output_name": "last_hidden_state", "format": fmt},
        },
        "module_output_name": "token_embeddings",
    }


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=4, ensure_ascii=False)
        f.write("\n")


def build(models, source, target, template, fmt, prompts=None):
    src, dst = os.path.join(models, source), os.path.join(models, target)
    if os.path.isdir(dst):
        print(f"{dst}: already there")
        return
    if not os.path.isfile(os.path.join(src, "model.safetensors")):
        sys.exit(f"{src}: missing; run scripts/make_qwen3_models.py and scripts/make_registry_models.py first")
    tmp = dst + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    with open(os.path.join(tmp, "chat_template.jinja"), "w") as f:
        f.write(template)
    write_json(os.path.join(tmp, "sentence_bert_config.json"), sentence_bert_config(fmt))
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))
    args = ap.parse_args()
    qwen3_config = os.path.join(args.models, "qwen3-tokenizer", "tokenizer_config.json")
    if not os.path.isfile(qwen3_config):
        sys.exit(f"{qwen3_config}: missing; run scripts/fetch-models.sh qwen3-tokenizer first")
    qwen3_template = json.load(open(qwen3_config))["chat_template"]
    build(args.models, "test-qwen3-embedding", "test-qwen3-chat", qwen3_template, "flat")
    build(args.models, "test-gemma3-embedding", "test-gemma3-chat", GEMMA3_TEMPLATE, "structured", GEMMA3_PROMPTS)


if __name__ == "__main__":
    main()
