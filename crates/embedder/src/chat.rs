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

/// sentence-transformers 6.x's `message` modality: each text becomes a
/// `user` message (its prompt, where not empty, a `system` message before
/// it), rendered through the chat template without a generation prompt,
/// tokenised without the tokenizer's own special tokens, cut to the
/// maximum length, and given the template's ending back where it was cut.
/// What a local model embeds and what a served one is sent.
#[derive(Debug, Clone)]
pub struct ChatInputs {
    template: ChatTemplate,
    format: MessageFormat,
    /// The template's ending in tokens per kind (query, document), written
    /// over the last tokens of a truncated text (`restore_suffix`; empty
    /// where it is off or the template has no common ending).
    endings: [Vec<u32>; 2],
}

impl ChatInputs {
    /// The chat inputs of a model directory whose sentence-transformers
    /// files ask for messages (`None` where they do not): its template, the
    /// format resolved for the model `family`, and the endings of both
    /// kinds' conversations. Asking for messages without a template is an
    /// error.
    pub(crate) fn load(
        dir: &Path,
        st: &SentenceTransformersConfig,
        family: &str,
        tokens: &Tokenization,
        prompts: &Prompts,
    ) -> Result<Option<Self>> {
        let Some(format) = st.message else {
            return Ok(None);
        };
        let template = ChatTemplate::from_dir(dir)?.ok_or_else(|| {
            Error::Invalid(format!(
                "{}: sentence_bert_config.json's modality_config takes chat messages, but the tokenizer has no chat template (chat_template.jinja or tokenizer_config.json's chat_template)",
                dir.display()
            ))
        })?;
        let format = format.resolve(family, template.source());
        let mut chat = Self {
            template,
            format,
            endings: [Vec::new(), Vec::new()],
        };
        if st.restore_suffix {
            chat.endings = [
                chat.ending(tokens, &prompts.query)?,
                chat.ending(tokens, &prompts.document)?,
            ];
        }
        Ok(Some(chat))
    }

    /// The template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The messages' format.
    pub fn format(&self) -> MessageFormat {
        self.format
    }

    /// The conversation of one text and its prompt.
    fn messages(&self, prompt: &str, text: &str) -> Vec<Message> {
        let content = |text: &str| match self.format {
            MessageFormat::Structured => Content::Parts(vec![Part {
                kind: "text".to_owned(),
                text: text.to_owned(),
            }]),
            _ => Content::Text(text.to_owned()),
        };
        let mut messages = Vec::with_capacity(2);
        if !prompt.is_empty() {
            messages.push(Message {
                role: "system".to_owned(),
                content: content(prompt),
            });
        }
        messages.push(Message {
            role: "user".to_owned(),
            content: content(text),
        });
        messages
    }

    /// One text rendered with its prompt.
    pub fn render(&self, prompt: &str, text: &str) -> Result<String> {
        self.template
            .render(&self.messages(prompt, text), false, &[])
    }

    /// The template's ending after the user's text, in tokens, as
    /// sentence-transformers finds it: the longest common ending of the
    /// renderings with the text replaced by `0` and by `1 2 3 4`, where
    /// shorter than both.
    fn ending(&self, tokens: &Tokenization, prompt: &str) -> Result<Vec<u32>> {
        let a = tokens.token_ids(&self.render(prompt, "0")?)?;
        let b = tokens.token_ids(&self.render(prompt, "1 2 3 4")?)?;
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
    pub(crate) fn tokenize<S: AsRef<str> + Sync>(
        &self,
        tokens: &Tokenization,
        texts: &[S],
        prompt: &str,
        kind: Kind,
    ) -> Result<Vec<Vec<u32>>> {
        use rayon::prelude::*;
        let max = tokens.max_length();
        let ending = &self.endings[usize::from(kind == Kind::Document)];
        texts
            .par_iter()
            .map(|text| {
                let mut ids = tokens.token_ids(&self.render(prompt, text.as_ref())?)?;
                if ids.len() > max {
                    ids.truncate(max);
                    let keep = ending.len().min(max);
                    ids[max - keep..].copy_from_slice(&ending[ending.len() - keep..]);
                }
                Ok(ids)
            })
            .collect()
    }
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
fn tojson(value: &Value, indent: Option<usize>) -> std::result::Result<Value, minijinja::Error> {
    let json: serde_json::Value = serde_json::to_value(value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let text = match indent {
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
    fn tojson_writes_as_python_does() {
        let t = ChatTemplate::new("{{ messages|tojson }}", "t.jinja");
        assert_eq!(
            t.render(&user("é <b>"), false, &[]).unwrap(),
            r#"[{"role": "user", "content": "é <b>"}]"#
        );
    }
}
