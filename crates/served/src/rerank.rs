//! The rerank APIs' shapes: `/rerank` as vLLM, Jina, Cohere and Infinity
//! speak it, text-embeddings-inference's `/rerank`, and vLLM's `/classify`
//! (a yes/no reranker's prompts scored by its classifier form).

use serde_json::{Value, json};

/// The request shape of a served reranker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteApi {
    /// `/rerank` with `query`, `documents` → `results[{index, relevance_score}]`
    /// (vLLM, Jina, Cohere, Infinity).
    Rerank,
    /// text-embeddings-inference: `/rerank` with `query`, `texts` → `[{index, score}]`.
    Tei,
}

/// What a rerank request asks beyond the texts.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The served model's name (`/rerank`; TEI serves one model).
    pub model: Option<&'a str>,
    /// The server is vLLM (its own fields instead of `return_documents`).
    pub vllm: bool,
    /// The model is a classifier (a cross-encoder), not a yes/no decoder.
    pub classifier: bool,
    /// Raw logits wanted, not probabilities.
    pub logits: bool,
    /// Let the server truncate (TEI), where no tokenizer cut the texts.
    pub truncate: bool,
}

/// One request's body: `query` against `documents`.
pub fn request(api: RemoteApi, ask: &Ask<'_>, query: &str, documents: &[&str]) -> Vec<u8> {
    let body = match api {
        RemoteApi::Rerank => {
            let mut body = json!({
                "model": ask.model,
                "query": query,
                "documents": documents,
                "top_n": documents.len(),
            });
            if ask.vllm {
                if ask.classifier {
                    body["use_activation"] = json!(!ask.logits);
                }
            } else {
                body["return_documents"] = json!(false);
            }
            body
        }
        RemoteApi::Tei => json!({
            "query": query,
            "texts": documents,
            "raw_scores": ask.logits,
            "return_text": false,
            "truncate": ask.truncate,
        }),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The scores of one `/classify` answer (`data[i].probs[0]`), in order.
pub fn parse_classify(answer: &[u8], count: usize) -> Result<Vec<f32>, String> {
    let value = crate::answer_json(answer)?;
    let data = crate::data_list(&value, count, "results")?;
    let mut scores = vec![f32::NAN; count];
    for (pos, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(pos, |i| i as usize);
        let p = item
            .pointer("/probs/0")
            .and_then(Value::as_f64)
            .ok_or("a result without probs")?;
        *scores.get_mut(index).ok_or("an index out of range")? = p as f32;
    }
    if scores.iter().any(|s| s.is_nan()) {
        return Err("indexes repeat".to_owned());
    }
    Ok(scores)
}

/// The scores of one rerank answer to `count` documents, in document order
/// (each index once), as the server gives them.
pub fn parse_scores(api: RemoteApi, answer: &[u8], count: usize) -> Result<Vec<f32>, String> {
    let value = crate::answer_json(answer)?;
    let (list, field) = match api {
        RemoteApi::Rerank => (
            value.get("results").and_then(Value::as_array),
            "relevance_score",
        ),
        RemoteApi::Tei => (value.as_array(), "score"),
    };
    let list = list.ok_or("no list of results")?;
    if list.len() != count {
        return Err(format!("{} scores for {count} documents", list.len()));
    }
    let mut scores = vec![f32::NAN; count];
    for item in list {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map(|i| i as usize)
            .filter(|&i| i < count)
            .ok_or("a result without a valid index")?;
        let score = item
            .get(field)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("a result without `{field}`"))?;
        scores[index] = score as f32;
    }
    if scores.iter().any(|s| s.is_nan()) {
        return Err("indexes repeat".to_owned());
    }
    Ok(scores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_classify_answer_whose_indexes_repeat_is_refused() {
        let answer = br#"{"data": [{"index": 0, "probs": [0.9]}, {"index": 0, "probs": [0.1]}]}"#;
        assert_eq!(parse_classify(answer, 2).unwrap_err(), "indexes repeat");
        let answer = br#"{"data": [{"index": 1, "probs": [0.9]}, {"index": 0, "probs": [0.1]}]}"#;
        assert_eq!(parse_classify(answer, 2).unwrap(), vec![0.1, 0.9]);
    }

    #[test]
    fn both_shapes_are_asked_and_read_in_document_order() {
        let ask = Ask {
            model: Some("m"),
            vllm: false,
            classifier: true,
            logits: true,
            truncate: false,
        };
        let rerank: Value =
            serde_json::from_slice(&request(RemoteApi::Rerank, &ask, "q", &["a", "b"])).unwrap();
        assert_eq!(rerank["top_n"], 2);
        assert_eq!(rerank["return_documents"], false);
        let tei: Value =
            serde_json::from_slice(&request(RemoteApi::Tei, &ask, "q", &["a"])).unwrap();
        assert_eq!(tei["raw_scores"], true);
        assert_eq!(tei["texts"][0], "a");
        let answer = br#"{"results": [{"index": 1, "relevance_score": 0.25}, {"index": 0, "relevance_score": 0.75}]}"#;
        assert_eq!(
            parse_scores(RemoteApi::Rerank, answer, 2).unwrap(),
            [0.75, 0.25]
        );
        let answer = br#"[{"index": 0, "score": 2.0}, {"index": 0, "score": 1.0}]"#;
        assert!(
            parse_scores(RemoteApi::Tei, answer, 2)
                .unwrap_err()
                .contains("repeat")
        );
        let answer = br#"{"data": [{"index": 0, "probs": [0.5, 0.5]}]}"#;
        assert_eq!(parse_classify(answer, 1).unwrap(), [0.5]);
    }
}
