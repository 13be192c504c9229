//! GFLOP/s of the native engine's dense layers on the shapes of a model.
//!
//!     cargo run --release -p embedder --example bench_linear [-- rows]
//!
//! Shapes: Qwen3-0.6B's (fused QKV 1024→4096, output 2048→1024, fused
//! gate/up 1024→6144, down 3072→1024) and MiniLM's (384→1152, 384→384,
//! 384→1536, 1536→384), each timed in f32 (the `gemm` crate) and bf16 (the
//! AVX-512 BF16 kernel), best of 5 runs.

use std::time::Instant;

use embedder::bench::{Dense, bf16_supported};

fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .map_or(4096, |a| a.parse().expect("rows"));
    let shapes = [
        ("qwen3 qkv", 1024, 4096),
        ("qwen3 o", 2048, 1024),
        ("qwen3 gate_up", 1024, 6144),
        ("qwen3 down", 3072, 1024),
        ("minilm qkv", 384, 1152),
        ("minilm ffn up", 384, 1536),
        ("minilm ffn down", 1536, 384),
    ];
    println!(
        "{rows} rows, {} threads; GFLOP/s in f32 (the gemm crate) and bf16 (our kernel)",
        rayon::current_num_threads()
    );
    for (name, inputs, outputs) in shapes {
        let x: Vec<f32> = (0..rows * inputs)
            .map(|i| ((i * 31 % 101) as f32 / 101.0 - 0.5) * 2.0)
            .collect();
        let mut out = vec![0.0f32; rows * outputs];
        let flops = 2.0 * (rows * inputs * outputs) as f64;
        let mut line = format!("{name:<16} {inputs:>5}→{outputs:<5}");
        for (kernel, bf16) in [("f32", false), ("bf16", true)] {
            if bf16 && !bf16_supported() {
                continue;
            }
            let layer = Dense::new(inputs, outputs, bf16);
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                layer.forward(&x, rows, &mut out);
                best = best.min(t.elapsed().as_secs_f64());
            }
            line += &format!("  {kernel}: {:6.1}", flops / best / 1e9);
        }
        println!("{line}");
    }
}
