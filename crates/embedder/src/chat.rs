//! A tokenizer's chat template, rendered as Hugging Face transformers
//! renders it (`apply_chat_template`): Jinja through `minijinja`, with
//! transformers' environment (`trim_blocks`, `lstrip_blocks`, Python's
//! string and dict methods, `raise_exception`, `strftime_now`, `tojson`),
//! the tokenizer's special tokens as variables, and `messages`,
//! `add_generation_prompt` and any further keyword given.

use std::path::{Path, PathBuf};

use minijinja::{Environment, ErrorKind, Value, context};

use crate::config::{MessageFormat, SentenceTransformersConfig};
use crate::error::{Error, Result};
use crate::tokenize::Tokenization;
use crate::{Kind, Prompts};

/// One message of a conversation: a role and its text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// What it says: a plain string, or a list of typed parts.
    pub content: Content,
}

/// A message's content as sentence-transformers passes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Content {
    /// A plain string (`format = "flat"`).
    Text(String),
    /// Typed parts, `[{"type": "text", "text": ...}]` (`format = "structured"`).
    Parts(Vec<Part>),
}

/// One typed part of a structured message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Part {
    /// Always `text` here.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its text.
    pub text: String,
}

/// A chat template and the special tokens it may name.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    /// Where it was read (`chat_template.jinja` or `tokenizer_config.json`).
    path: PathBuf,
    /// `bos_token`, `eos_token`, `unk_token`, `pad_token`, … as the
    /// tokenizer's config names them.
    specials: Vec<(String, String)>,
}

impl ChatTemplate {
    /// The chat template of a model directory, where it has one:
    /// `chat_template.jinja`, else `tokenizer_config.json`'s `chat_template`
    /// (a string, or a list of named templates: the one named `default`).
    pub fn from_dir(dir: &Path) -> Result<Option<Self>> {
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = if config_path.is_file() {
            crate::config::read_json(&config_path)?
        } else {
            serde_json::Value::Null
        };
        let specials: Vec<(String, String)> = config
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| k.ends_with("_token"))
                    .filter_map(|(k, v)| {
                        let text = match v {
                            serde_json::Value::String(s) => s.clone(),
                            serde_json::Value::Object(o) => o.get("content")?.as_str()?.to_owned(),
                            _ => return None,
                        };
                        Some((k.clone(), text))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let file = dir.join("chat_template.jinja");
        if file.is_file() {
            let source =
                std::fs::read_to_string(&file).map_err(|e| Error::format(&file, e.to_string()))?;
            return Ok(Some(Self {
                source,
                path: file,
                specials,
            }));
        }
        let source = match config.get("chat_template") {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str())
                .map(str::to_owned)
                .ok_or_else(|| {
                    Error::format(
                        &config_path,
                        "chat_template: a list of templates without one named \"default\"",
                    )
                })?,
            Some(_) => {
                return Err(Error::format(
                    &config_path,
                    "chat_template: neither a string nor a list of named templates",
                ));
            }
        };
        Ok(Some(Self {
            source,
            path: config_path,
            specials,
        }))
    }

    /// A template given as text (`path` names it in errors).
    pub fn new(source: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            source: source.into(),
            path: path.into(),
            specials: Vec::new(),
        }
    }

    /// Where the template was read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages`, with `add_generation_prompt` and `extra`
    /// variables (a `task`, say). A template that cannot be compiled or
    /// rendered, or that raises, is an error naming the file and its message.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        extra: &[(&str, Value)],
    ) -> Result<String> {
        let mut env = Environment::new();
        // A template is code from a model directory: each render is bounded (the conversations
        // rendered here take a few thousand instructions; a loop of 10^10 runs out).
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| self.error(&e))?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| self.error(&e))?;
        let mut vars: Vec<(String, Value)> = self
            .specials
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        vars.push((
            "messages".to_owned(),
            Value::from(minijinja::value::Serde(messages)),
        ));
        vars.push((
            "add_generation_prompt".to_owned(),
            Value::from(add_generation_prompt),
        ));
        for (k, v) in extra {
            vars.push(((*k).to_owned(), v.clone()));
        }
        let ctx: Value = vars
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
            .into();
        template
            .render(context! { ..ctx })
            .map_err(|e| self.error(&e))
    }

    fn error(&self, e: &minijinja::Error) -> Error {
        let mut message = match e.kind() {
            ErrorKind::InvalidOperation if e.detail().is_some_and(|d| d.starts_with(RAISED)) => {
                format!(
                    "the chat template raised: {}",
                    e.detail().unwrap_or_default().trim_start_matches(RAISED)
                )
            }
            _ => format!("the chat template cannot be rendered: {e}"),
        };
        if let Some(line) = e.line() {
            message.push_str(&format!(" (template line {line})"));
        }
        Error::format(&self.path, message)
    }
}

/// The roles a (query, document) pair's two messages take.
/// The instructions one render may take (minijinja's fuel).
const TEMPLATE_FUEL: u64 = 1_000_000;

const PAIR_ROLES: [&str; 2] = ["query", "document"];

/// sentence-transformers' probe of a pair template: a baseline, then one
/// pair per role that changes only that role's content.
const PAIR_PROBES: [(&str, &str); 3] = [
    ("alpha", "bravo"),
    ("charlie", "bravo"),
    ("alpha", "foxtrot"),
];

/// sentence-transformers 6.x's `message` modality: each text becomes a
/// `user` message, each (query, document) pair of a cross-encoder a `query`
/// and a `document` message (the prompt, where not empty, a `system`
/// message before them), rendered through the chat template (with the
/// `processing_kwargs.chat_template` arguments; no generation prompt unless
/// they ask for one), tokenised without the tokenizer's own special tokens,
/// cut to the maximum length, and given the template's ending back where
/// it was cut. What a local model reads and what a served one is sent.
#[derive(Debug, Clone)]
pub struct ChatInputs {
    template: ChatTemplate,
    format: MessageFormat,
    /// `add_generation_prompt` (default false).
    generation_prompt: bool,
    /// The further template variables of `processing_kwargs.chat_template`.
    kwargs: Vec<(String, Value)>,
    /// The template's ending in tokens per kind (query, document, pair),
    /// written over the last tokens of a truncated input (`restore_suffix`;
    /// empty where it is off or the template has no common ending).
    endings: [Vec<u32>; 3],
}

impl ChatInputs {
    /// The chat inputs of a model directory whose sentence-transformers
    /// files ask for messages (`None` where they do not): its template, the
    /// format resolved for the model `family`, and the endings of both
    /// kinds' conversations. Asking for messages without a template is an
    /// error.
    pub fn load(
        dir: &Path,
        st: &SentenceTransformersConfig,
        family: &str,
        tokens: &Tokenization,
        prompts: &Prompts,
    ) -> Result<Option<Self>> {
        let Some(mut chat) = Self::read(dir, st, family)? else {
            return Ok(None);
        };
        if st.restore_suffix {
            chat.endings[0] = chat.ending(tokens, &prompts.query, Shape::Text(Kind::Query))?;
            chat.endings[1] =
                chat.ending(tokens, &prompts.document, Shape::Text(Kind::Document))?;
        }
        Ok(Some(chat))
    }

    /// The chat inputs of a cross-encoder directory whose files ask for
    /// messages (`None` where they do not), for pairs with `prompt`: as
    /// sentence-transformers' `CrossEncoder` does, a template that cannot
    /// carry a `query`/`document` pair (one role's content does not reach
    /// the rendering, or it raises) is an error.
    pub fn load_pairs(
        dir: &Path,
        st: &SentenceTransformersConfig,
        family: &str,
        tokens: &Tokenization,
        prompt: &str,
    ) -> Result<Option<Self>> {
        let Some(mut chat) = Self::read(dir, st, family)? else {
            return Ok(None);
        };
        chat.verify_pair_roles()?;
        if st.restore_suffix {
            chat.endings[2] = chat.ending(tokens, prompt, Shape::Pair)?;
        }
        Ok(Some(chat))
    }

    /// The template, format and arguments, where the files ask for messages:
    /// `modality_config.message`, or (a directory without `modules.json`,
    /// whose modalities sentence-transformers 6.x infers) a tokenizer with a
    /// chat template.
    fn read(dir: &Path, st: &SentenceTransformersConfig, family: &str) -> Result<Option<Self>> {
        let template = ChatTemplate::from_dir(dir)?;
        let (format, template) = match (st.message, template) {
            (None, Some(template)) if !st.has_modules => (MessageFormat::Auto, template),
            (None, _) => return Ok(None),
            (Some(format), Some(template)) => (format, template),
            (Some(_), None) => {
                return Err(Error::Invalid(format!(
                    "{}: sentence_bert_config.json's modality_config takes chat messages, but the tokenizer has no chat template (chat_template.jinja or tokenizer_config.json's chat_template)",
                    dir.display()
                )));
            }
        };
        let format = format.resolve(family, template.source());
        let mut generation_prompt = false;
        let mut kwargs = Vec::new();
        for (key, value) in &st.chat_kwargs {
            if key == "add_generation_prompt" {
                generation_prompt = value.as_bool().ok_or_else(|| {
                    Error::format(
                        &dir.join("sentence_bert_config.json"),
                        "processing_kwargs.chat_template.add_generation_prompt: not true or false",
                    )
                })?;
            } else {
                kwargs.push((
                    key.clone(),
                    Value::from(minijinja::value::Serde(value.clone())),
                ));
            }
        }
        Ok(Some(Self {
            template,
            format,
            generation_prompt,
            kwargs,
            endings: Default::default(),
        }))
    }

    /// The template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The messages' format.
    pub fn format(&self) -> MessageFormat {
        self.format
    }

    /// A message of `role` in the model's format.
    fn message(&self, role: &str, text: &str) -> Message {
        Message {
            role: role.to_owned(),
            content: match self.format {
                MessageFormat::Structured => Content::Parts(vec![Part {
                    kind: "text".to_owned(),
                    text: text.to_owned(),
                }]),
                _ => Content::Text(text.to_owned()),
            },
        }
    }

    /// The conversation of one input and its prompt: a text is a `user`
    /// message, a pair a `query` and a `document` message.
    fn messages(&self, prompt: &str, input: Input<'_>) -> Vec<Message> {
        let mut messages = Vec::with_capacity(3);
        if !prompt.is_empty() {
            messages.push(self.message("system", prompt));
        }
        match input {
            Input::Text(text) => messages.push(self.message("user", text)),
            Input::Pair(query, document) => {
                messages.push(self.message(PAIR_ROLES[0], query));
                messages.push(self.message(PAIR_ROLES[1], document));
            }
        }
        messages
    }

    /// One input rendered with its prompt; texts of a bi-encoder get their
    /// kind as the `task` variable, as `encode_query` / `encode_document`
    /// pass it (the template's own arguments win).
    fn render_input(&self, prompt: &str, input: Input<'_>, task: Option<Kind>) -> Result<String> {
        let mut vars: Vec<(&str, Value)> = Vec::with_capacity(self.kwargs.len() + 1);
        if let Some(kind) = task {
            vars.push((
                "task",
                Value::from(match kind {
                    Kind::Query => "query",
                    Kind::Document => "document",
                }),
            ));
        }
        vars.extend(self.kwargs.iter().map(|(k, v)| (k.as_str(), v.clone())));
        self.template
            .render(&self.messages(prompt, input), self.generation_prompt, &vars)
    }

    /// One text of `kind` rendered with its prompt.
    pub fn render(&self, prompt: &str, text: &str, kind: Kind) -> Result<String> {
        self.render_input(prompt, Input::Text(text), Some(kind))
    }

    /// One (query, document) pair rendered with its prompt.
    pub fn render_pair(&self, prompt: &str, query: &str, document: &str) -> Result<String> {
        self.render_input(prompt, Input::Pair(query, document), None)
    }

    /// sentence-transformers' check that the template carries a pair: the
    /// probes rendered (without a prompt), each role's change must change
    /// the rendering.
    fn verify_pair_roles(&self) -> Result<()> {
        let renders: Result<Vec<String>> = PAIR_PROBES
            .iter()
            .map(|(q, d)| self.render_input("", Input::Pair(q, d), None))
            .collect();
        let failure = match renders {
            Err(e) => format!("it raised: {e}"),
            Ok(renders) => {
                let dropped: Vec<String> = PAIR_ROLES
                    .iter()
                    .zip(&renders[1..])
                    .filter(|(_, r)| **r == renders[0])
                    .map(|(role, _)| format!("'{role}'"))
                    .collect();
                if dropped.is_empty() {
                    return Ok(());
                }
                format!(
                    "the {} content does not reach the rendered prompt",
                    dropped.join(" and ")
                )
            }
        };
        Err(Error::format(
            self.template.path(),
            format!(
                "the chat template cannot carry a 'query'/'document' pair ({failure}): a cross-encoder's pair is rendered as one message per role, as sentence-transformers 6.3 renders it; give the model a template that writes both, e.g. <Query>: {{{{ messages | selectattr(\"role\", \"eq\", \"query\") | map(attribute=\"content\") | first }}}}"
            ),
        ))
    }

    /// The template's ending after the content, in tokens, as
    /// sentence-transformers finds it: the longest common ending of the
    /// renderings with the content (the text, or both sides of a pair)
    /// replaced by `0` and by `1 2 3 4`, where shorter than both.
    fn ending(&self, tokens: &Tokenization, prompt: &str, shape: Shape) -> Result<Vec<u32>> {
        let render = |filler: &str| match shape {
            Shape::Text(kind) => self.render(prompt, filler, kind),
            Shape::Pair => self.render_pair(prompt, filler, filler),
        };
        let a = tokens.token_ids(&render("0")?)?;
        let b = tokens.token_ids(&render("1 2 3 4")?)?;
        let common = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        Ok(if common > 0 && common < a.len().min(b.len()) {
            a[a.len() - common..].to_vec()
        } else {
            Vec::new()
        })
    }

    /// Token ids of texts of `kind` (with their `prompt`): rendered,
    /// tokenised as they are, cut to the maximum length with the ending
    /// written back over the last tokens.
    pub fn tokenize<S: AsRef<str> + Sync>(
        &self,
        tokens: &Tokenization,
        texts: &[S],
        prompt: &str,
        kind: Kind,
    ) -> Result<Vec<Vec<u32>>> {
        use rayon::prelude::*;
        let ending = &self.endings[usize::from(kind == Kind::Document)];
        texts
            .par_iter()
            .map(|text| {
                let ids = tokens.token_ids(&self.render(prompt, text.as_ref(), kind)?)?;
                Ok(cut(ids, tokens.max_length(), ending))
            })
            .collect()
    }

    /// Token ids of (query, document) pairs with their `prompt`, as
    /// [`ChatInputs::tokenize`] makes a text's (for a directory loaded by
    /// [`ChatInputs::load_pairs`]).
    pub fn tokenize_pairs<A, B>(
        &self,
        tokens: &Tokenization,
        pairs: &[(A, B)],
        prompt: &str,
    ) -> Result<Vec<Vec<u32>>>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        use rayon::prelude::*;
        pairs
            .par_iter()
            .map(|(q, d)| {
                let ids = tokens.token_ids(&self.render_pair(prompt, q.as_ref(), d.as_ref())?)?;
                Ok(cut(ids, tokens.max_length(), &self.endings[2]))
            })
            .collect()
    }
}

/// What one rendering holds.
#[derive(Debug, Clone, Copy)]
enum Input<'a> {
    Text(&'a str),
    Pair(&'a str, &'a str),
}

/// Whose ending [`ChatInputs::ending`] finds.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Text(Kind),
    Pair,
}

/// `ids` cut to `max` tokens, the cut one ending with `ending` again.
fn cut(mut ids: Vec<u32>, max: usize, ending: &[u32]) -> Vec<u32> {
    if ids.len() > max {
        ids.truncate(max);
        let keep = ending.len().min(max);
        ids[max - keep..].copy_from_slice(&ending[ending.len() - keep..]);
    }
    ids
}

const RAISED: &str = "raise_exception: ";

/// `raise_exception(message)`: what templates call to refuse an input.
fn raise_exception(message: &str) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{message}"),
    ))
}

/// `strftime_now(format)`: the date some templates print. Rendering must
/// not depend on the clock (vectors are cached by their inputs), so it is
/// the Unix epoch's date in the format's common fields.
fn strftime_now(format: &str) -> String {
    format
        .replace("%Y", "1970")
        .replace("%m", "01")
        .replace("%d", "01")
        .replace("%B", "January")
        .replace("%b", "Jan")
        .replace("%H", "00")
        .replace("%M", "00")
        .replace("%S", "00")
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False)`
/// (`, ` and `: ` separators), or indented by `indent`.
/// The widest indent `tojson` takes (Python's takes any; templates use 2 or 4).
const MAX_INDENT: usize = 64;

fn tojson(value: &Value, indent: Option<usize>) -> std::result::Result<Value, minijinja::Error> {
    let json: serde_json::Value = serde_json::to_value(value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let text = match indent {
        Some(n) if n > MAX_INDENT => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: indent {n} is more than {MAX_INDENT}"),
            ));
        }
        Some(n) => {
            let pad = vec![b' '; n];
            let formatter = serde_json::ser::PrettyFormatter::with_indent(&pad);
            let mut out = Vec::new();
            let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
            serde::Serialize::serialize(&json, &mut ser)
                .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
            String::from_utf8(out).unwrap_or_default()
        }
        None => python_json(&json),
    };
    Ok(Value::from_safe_string(text))
}

/// Python's `json.dumps` with its default separators.
fn python_json(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        serde_json::Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    serde_json::Value::String(k.clone()),
                    python_json(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Vec<Message> {
        vec![Message {
            role: "user".to_owned(),
            content: Content::Text(text.to_owned()),
        }]
    }

    #[test]
    fn renders_a_chatml_template_with_the_whitespace_rules() {
        // The outputs are Jinja2 3.1's (trim_blocks, lstrip_blocks), as transformers renders.
        let t = ChatTemplate::new(
            "{% for message in messages %}\n{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n{% endfor %}\n{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
            "t.jinja",
        );
        assert_eq!(
            t.render(&user("hello world"), false, &[]).unwrap(),
            "<|im_start|>user\nhello world<|im_end|>\n\n"
        );
        assert_eq!(
            t.render(&user("hi"), true, &[]).unwrap(),
            "<|im_start|>user\nhi<|im_end|>\n\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_string_methods_and_structured_content() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{% if m.content is string %}{{ m.content.strip().upper() }}{% else %}{% for p in m.content %}{{ p.text.split(' ')|length }}{% endfor %}{% endif %}{% endfor %}",
            "t.jinja",
        );
        assert_eq!(t.render(&user("  a b  "), false, &[]).unwrap(), "A B");
        let parts = vec![Message {
            role: "user".to_owned(),
            content: Content::Parts(vec![Part {
                kind: "text".to_owned(),
                text: "x y z".to_owned(),
            }]),
        }];
        assert_eq!(t.render(&parts, false, &[]).unwrap(), "3");
    }

    #[test]
    fn a_raise_or_an_unknown_filter_names_the_file_and_the_message() {
        let t = ChatTemplate::new(
            "{{ raise_exception('Conversation roles must alternate') }}",
            "models/x/tokenizer_config.json",
        );
        let e = t.render(&user("a"), false, &[]).unwrap_err().to_string();
        assert!(
            e.contains("models/x/tokenizer_config.json")
                && e.contains("the chat template raised: Conversation roles must alternate"),
            "{e}"
        );
        let t = ChatTemplate::new("{{ messages|nosuchfilter }}", "c.jinja");
        let e = t.render(&user("a"), false, &[]).unwrap_err().to_string();
        assert!(e.contains("c.jinja") && e.contains("nosuchfilter"), "{e}");
    }

    #[test]
    fn a_template_that_runs_without_end_or_pads_without_bound_is_refused() {
        let t = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "loop.jinja",
        );
        let e = t.render(&user("a"), false, &[]).unwrap_err().to_string();
        assert!(e.contains("loop.jinja") && e.contains("fuel"), "{e}");
        let t = ChatTemplate::new("{{ messages|tojson(1000000000000) }}", "pad.jinja");
        let e = t.render(&user("a"), false, &[]).unwrap_err().to_string();
        assert!(e.contains("pad.jinja") && e.contains("indent"), "{e}");
    }

    /// `task` per kind (as `encode_query` / `encode_document` pass it), the
    /// template arguments of `processing_kwargs.chat_template` as
    /// variables, `add_generation_prompt` among them, and pairs as `query`
    /// and `document` messages after the prompt's `system` one.
    #[test]
    fn task_template_arguments_and_pairs() {
        let template = ChatTemplate::new(
            "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}{{ task }}|{% if add_generation_prompt %}GEN{% endif %}|{{ enable_thinking }}",
            "t.jinja",
        );
        let mut st = SentenceTransformersConfig {
            message: Some(MessageFormat::Flat),
            has_modules: true,
            ..Default::default()
        };
        st.chat_kwargs
            .insert("add_generation_prompt".to_owned(), serde_json::json!(true));
        st.chat_kwargs
            .insert("enable_thinking".to_owned(), serde_json::json!(false));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("chat_template.jinja"), template.source()).unwrap();
        let chat = ChatInputs::read(dir.path(), &st, "qwen3").unwrap().unwrap();
        assert_eq!(
            chat.render("P", "hi", Kind::Query).unwrap(),
            "system=P;user=hi;query|GEN|False"
        );
        assert_eq!(
            chat.render("", "hi", Kind::Document).unwrap(),
            "user=hi;document|GEN|False"
        );
        assert_eq!(
            chat.render_pair("P", "q", "d").unwrap(),
            "system=P;query=q;document=d;|GEN|False"
        );
        // (Python prints a false as `False`, as transformers renders it.)
        // The template's own `task` wins over the kind's.
        st.chat_kwargs
            .insert("task".to_owned(), serde_json::json!("retrieval"));
        let chat = ChatInputs::read(dir.path(), &st, "qwen3").unwrap().unwrap();
        assert!(
            chat.render("", "hi", Kind::Query)
                .unwrap()
                .ends_with("retrieval|GEN|False")
        );
        // Without modules.json a template means messages; with it, only the
        // message modality does.
        st.message = None;
        assert!(
            ChatInputs::read(dir.path(), &st, "qwen3")
                .unwrap()
                .is_none()
        );
        st.has_modules = false;
        assert_eq!(
            ChatInputs::read(dir.path(), &st, "qwen3")
                .unwrap()
                .unwrap()
                .format(),
            MessageFormat::Auto.resolve("qwen3", template.source())
        );
    }

    #[test]
    fn tojson_writes_as_python_does() {
        let t = ChatTemplate::new("{{ messages|tojson }}", "t.jinja");
        assert_eq!(
            t.render(&user("é <b>"), false, &[]).unwrap(),
            r#"[{"role": "user", "content": "é <b>"}]"#
        );
    }
}
