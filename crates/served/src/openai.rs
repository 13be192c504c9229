//! The OpenAI embeddings API's shapes (`POST /embeddings`): the request
//! body and the answer, as vLLM, TEI, Infinity and hosted APIs speak it.

use base64::Engine as _;
use serde_json::{Value, json};

/// One request's body: `inputs` (token-id lists or texts, as JSON) for
/// the served `model`, vectors as base64; `dimensions` where asked (a
/// Matryoshka width); with `raw`, vLLM's own fields for the pooled vector as
/// is, little-endian.
pub fn embeddings_request(
    model: &str,
    inputs: &[Value],
    dimensions: Option<usize>,
    raw: bool,
) -> Vec<u8> {
    let mut body = json!({
        "model": model,
        "input": inputs,
        "encoding_format": "base64",
    });
    if let Some(d) = dimensions {
        body["dimensions"] = json!(d);
    }
    if raw {
        // vLLM's own fields: the pooled vector as is, little-endian floats.
        body["use_activation"] = json!(false);
        body["endianness"] = json!("little");
    }
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Reads one answer to `count` inputs: `data[i].embedding` (base64
/// little-endian f32, or a list of numbers) in index order, all of one
/// width, and `usage.prompt_tokens` where the server counts them. An answer
/// that is not that is an error saying what is wrong.
pub fn parse_embeddings(
    answer: &[u8],
    count: usize,
) -> std::result::Result<(Vec<f32>, Option<usize>), String> {
    let value = crate::answer_json(answer)?;
    let data = crate::data_list(&value, count, "vectors")?;
    let mut rows: Vec<(usize, Vec<f32>)> = Vec::with_capacity(count);
    for (pos, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(pos, |i| i as usize);
        let vector = match item.get("embedding") {
            Some(Value::String(b64)) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| format!("embedding {index}: not base64 ({e})"))?;
                if bytes.len() % 4 != 0 {
                    return Err(format!("embedding {index}: {} bytes", bytes.len()));
                }
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect()
            }
            Some(Value::Array(values)) => values
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| format!("embedding {index}: not a list of numbers"))?,
            _ => return Err(format!("item {pos} has no embedding")),
        };
        rows.push((index, vector));
    }
    rows.sort_by_key(|(i, _)| *i);
    if rows.iter().enumerate().any(|(pos, (i, _))| pos != *i) {
        return Err("the indexes of `data` are not 0..n".to_owned());
    }
    let dim = rows.first().map_or(0, |(_, v)| v.len());
    if rows.iter().any(|(_, v)| v.len() != dim) || dim == 0 {
        return Err("vectors of different widths".to_owned());
    }
    let tokens = value
        .pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .map(|n| n as usize);
    Ok((rows.into_iter().flat_map(|(_, v)| v).collect(), tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_in_index_order_from_base64_or_lists() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(
            [1.5f32, -2.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
        let answer = json!({
            "data": [
                {"index": 1, "embedding": [3.0, 4.0]},
                {"index": 0, "embedding": b64},
            ],
            "usage": {"prompt_tokens": 7},
        });
        let (vectors, tokens) = parse_embeddings(&serde_json::to_vec(&answer).unwrap(), 2).unwrap();
        assert_eq!(vectors, [1.5, -2.0, 3.0, 4.0]);
        assert_eq!(tokens, Some(7));
        for (bad, why) in [
            (
                json!({"data": [{"embedding": [1.0]}]}),
                "vectors for 2 inputs",
            ),
            (
                json!({"data": [{"embedding": [1.0]}, {"embedding": [1.0, 2.0]}]}),
                "different widths",
            ),
            (
                json!({"data": [{"embedding": "***"}, {"embedding": [1.0]}]}),
                "not base64",
            ),
            (json!({"nothing": 1}), "no `data` list"),
        ] {
            let err = parse_embeddings(&serde_json::to_vec(&bad).unwrap(), 2).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        let body: Value =
            serde_json::from_slice(&embeddings_request("m", &[json!("x")], Some(64), true))
                .unwrap();
        assert_eq!(body["dimensions"], 64);
        assert_eq!(body["endianness"], "little");
        assert_eq!(body["encoding_format"], "base64");
    }
}
