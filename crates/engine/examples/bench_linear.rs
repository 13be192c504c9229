//! This CPU's arithmetic peaks, and how close the native engine's dense
//! layers come to them on the shapes of the models.
//!
//!     cargo run --release -p engine --example bench_linear [-- rows]
//!
//! First the peak of each instruction this CPU has that the kernels are
//! built on, over all of rayon's threads (registers only): `vfmadd231ps` on
//! 512 and 256 bits, `vdpbf16ps`, `vpdpbusd` on 512 bits (AVX-512 VNNI) and
//! on 256 bits (AVX-VNNI), and the AVX2 int8 step without VNNI (`vpsignb`,
//! `vpmaddubsw`, `vpmaddwd`, `vpaddd`: 32 byte products into eight i32
//! sums), and AMX's `tdpbf16ps` and `tdpbusd` (four tile products in flight,
//! operands in tiles: the tile unit's own limit). Then, for MiniLM's shapes (384→1152, 384→384, 384→1536, 1536→384)
//! and Qwen3-0.6B's (fused QKV 1024→4096, output 2048→1024, fused gate/up
//! 1024→6144, down 3072→1024), the rate of each path at the active level
//! (`SKILLRET_MAX_ISA` caps it: f32 is the `gemm` crate at avx512 on CPUs
//! with full-width 512-bit FMA and ours elsewhere; bf16 ours on AMX tiles at amx and on `vdpbf16ps` at avx512; int8 ours on the kernel of the level), best
//! of 5 runs, activation rounding or quantisation included, and its share
//! of the peak of the instruction it runs on. Rates are in 10⁹
//! multiply-adds × 2 per second (GFLOP/s or GOP/s). With `--tsv`, lines are
//! tab-separated for scripts. In between, the per-thread f32 and bf16 rates
//! the engine measures to choose the arithmetic of int8's kept layers
//! ([`engine::rates`]), and how long measuring them took.

use std::time::Instant;

use engine::Precision;
use engine::bench::{Dense, supported};
use engine::rates::{Instruction, peak_gops};

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
    let level = engine::isa::check().unwrap_or_else(|e| panic!("{e}"));
    let peaks: Vec<(Instruction, f64)> = Instruction::ALL
        .into_iter()
        .filter_map(|instruction| {
            // Warm up (clock ramps), then the best of three.
            let _ = peak_gops(instruction, 2_000_000);
            (0..3)
                .filter_map(|_| peak_gops(instruction, 20_000_000))
                .reduce(f64::max)
                .map(|p| (instruction, p))
        })
        .collect();
    let peak_of = |precision: Precision| {
        Instruction::of(precision)
            .and_then(|i| peaks.iter().find(|(p, _)| *p == i).map(|(_, g)| *g))
    };
    // What the engine's plan compares (one thread, measured as a run does,
    // without reading or writing the cache).
    let start = Instant::now();
    let units = engine::rates::UnitRates::measure();
    let took = start.elapsed().as_secs_f64() * 1e3;
    if tsv {
        println!("level\t{level}");
        if let Some(u) = units {
            let rate = |r: Option<f64>| r.map_or("-".to_owned(), |r| r.to_string());
            println!(
                "units\t{}\t{}\t{}\t{took:.0}\t{}",
                u.fma256,
                rate(u.fma512),
                rate(u.bf16),
                rate(u.amx)
            );
        }
        for (instruction, peak) in &peaks {
            println!("peak\t{}\t{peak:.1}", instruction.name());
        }
    } else {
        println!(
            "{threads} threads, kernels at the {level} level; peak of each instruction (GFLOP/s or GOP/s):"
        );
        for instruction in Instruction::ALL {
            match peaks.iter().find(|(p, _)| *p == instruction) {
                Some((_, peak)) => println!("  {:<12} {peak:8.1}", instruction.name()),
                None => println!("  {:<12}  not on this CPU", instruction.name()),
            }
        }
        match units {
            Some(u) => {
                let rate = |r: Option<f64>| r.map_or("-".to_owned(), |r| r.to_string());
                println!(
                    "unit rates the engine chooses by (one thread, measured in {took:.0} ms): \
                     fma256 {} fma512 {} bf16 {} amx {}: f32 products on {}, int8 keeps its layers in {}",
                    u.fma256,
                    rate(u.fma512),
                    rate(u.bf16),
                    rate(u.amx),
                    if u.wide_fma() {
                        "the gemm crate's AVX-512 kernels"
                    } else {
                        "our AVX2 panels"
                    },
                    if u.bf16_faster() { "bf16" } else { "f32" }
                );
            }
            None => println!("below avx2: nothing to choose"),
        }
        println!("\n{rows} rows; rate of each path and its share of its instruction's peak");
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
        for &(kernel, precision) in &PATHS {
            if !supported(precision) {
                continue;
            }
            let peak = peak_of(precision);
            let layer = Dense::new(inputs, outputs, precision);
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
