//! This CPU's arithmetic peaks, and how close the native engine's dense
//! layers come to them on the shapes of the models.
//!
//!     cargo run --release -p embedder --example bench_linear [-- rows]
//!
//! First the peak of each instruction the kernels are built on, over all of
//! rayon's threads (registers only: `vfmadd231ps` for f32, `vdpbf16ps` for
//! bf16, `vpdpbusd` for int8). Then, for MiniLM's shapes (384→1152,
//! 384→384, 384→1536, 1536→384) and Qwen3-0.6B's (fused QKV 1024→4096,
//! output 2048→1024, fused gate/up 1024→6144, down 3072→1024), the rate of
//! each path — f32 (the `gemm` crate), bf16 and int8 (ours), best of 5 runs,
//! activation rounding or quantisation included — and its share of its own
//! peak. Rates are in 10⁹ multiply-adds × 2 per second (GFLOP/s or GOP/s).
//! With `--tsv`, lines are tab-separated for scripts.

use std::time::Instant;

use embedder::Precision;
use embedder::bench::{Dense, peak_gops, supported};

const PATHS: [(&str, Precision); 3] = [
    ("f32", Precision::F32),
    ("bf16", Precision::Bf16),
    ("int8", Precision::Int8),
];

fn main() {
    let mut rows = 4096;
    let mut tsv = false;
    for arg in std::env::args().skip(1) {
        if arg == "--tsv" {
            tsv = true;
        } else {
            rows = arg.parse().expect("rows: a number of rows, or --tsv");
        }
    }
    let threads = rayon::current_num_threads();
    let peaks: Vec<Option<f64>> = PATHS
        .iter()
        .map(|&(_, precision)| {
            // Warm up (clock ramps), then the best of three.
            let _ = peak_gops(precision, 2_000_000);
            (0..3)
                .filter_map(|_| peak_gops(precision, 20_000_000))
                .reduce(f64::max)
        })
        .collect();
    if tsv {
        for ((name, _), peak) in PATHS.iter().zip(&peaks) {
            if let Some(peak) = peak {
                println!("peak\t{name}\t{peak:.1}");
            }
        }
    } else {
        println!(
            "{threads} threads; peak of the instruction each path is built on (GFLOP/s or GOP/s):"
        );
        for ((name, _), peak) in PATHS.iter().zip(&peaks) {
            match peak {
                Some(peak) => println!("  {name:<5} {peak:8.1}"),
                None => println!("  {name:<5}  not on this CPU"),
            }
        }
        println!("\n{rows} rows; rate of each path and its share of that peak");
    }
    let shapes = [
        ("minilm qkv", 384, 1152),
        ("minilm attn out", 384, 384),
        ("minilm ffn up", 384, 1536),
        ("minilm ffn down", 1536, 384),
        ("qwen3 qkv", 1024, 4096),
        ("qwen3 o", 2048, 1024),
        ("qwen3 gate_up", 1024, 6144),
        ("qwen3 down", 3072, 1024),
    ];
    for (name, inputs, outputs) in shapes {
        let x: Vec<f32> = (0..rows * inputs)
            .map(|i| ((i * 31 % 101) as f32 / 101.0 - 0.5) * 2.0)
            .collect();
        let mut out = vec![0.0f32; rows * outputs];
        let flops = 2.0 * (rows * inputs * outputs) as f64;
        let mut line = format!("{name:<16} {inputs:>5}→{outputs:<5}");
        for ((kernel, precision), peak) in PATHS.iter().zip(&peaks) {
            if !supported(*precision) {
                continue;
            }
            let layer = Dense::new(inputs, outputs, *precision);
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                layer.forward(&x, rows, &mut out);
                best = best.min(t.elapsed().as_secs_f64());
            }
            let rate = flops / best / 1e9;
            let share = peak.map_or(f64::NAN, |p| 100.0 * rate / p);
            if tsv {
                println!("layer\t{name}\t{inputs}\t{outputs}\t{kernel}\t{rate:.1}\t{share:.1}");
            } else {
                line += &format!("  {kernel}: {rate:6.1} ({share:3.0}%)");
            }
        }
        if !tsv {
            println!("{line}");
        }
    }
}
