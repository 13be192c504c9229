//! One dense layer in a loop, for a profiler: `dense_loop INPUTS OUTPUTS
//! ROWS PRECISION SECONDS` (precision f32, bf16 or int8), printing its rate.
//!
//!     perf record -g target/release/examples/dense_loop 1024 4096 4096 bf16 10

use std::time::Instant;

use engine::Precision;
use engine::bench::Dense;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: dense_loop INPUTS OUTPUTS ROWS f32|bf16|int8 SECONDS";
    let [inputs, outputs, rows, precision, seconds] = args.as_slice() else {
        panic!("{usage}");
    };
    let number = |s: &str| s.parse::<usize>().expect(usage);
    let (inputs, outputs, rows) = (number(inputs), number(outputs), number(rows));
    let precision = match precision.as_str() {
        "f32" => Precision::F32,
        "bf16" => Precision::Bf16,
        "int8" => Precision::Int8,
        _ => panic!("{usage}"),
    };
    let seconds: f64 = seconds.parse().expect(usage);
    let x: Vec<f32> = (0..rows * inputs)
        .map(|i| ((i * 31 % 101) as f32 / 101.0 - 0.5) * 2.0)
        .collect();
    let mut out = vec![0.0f32; rows * outputs];
    let layer = Dense::new(inputs, outputs, precision);
    let flops = 2.0 * (rows * inputs * outputs) as f64;
    let (start, mut calls, mut best) = (Instant::now(), 0usize, f64::MAX);
    while start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        layer.forward(&x, rows, &mut out);
        best = best.min(t.elapsed().as_secs_f64());
        calls += 1;
    }
    let mean = start.elapsed().as_secs_f64() / calls as f64;
    println!(
        "{inputs}→{outputs} × {rows} rows, {precision:?}: {calls} calls, best {:.1}, mean {:.1} GFLOP/s",
        flops / best / 1e9,
        flops / mean / 1e9
    );
}
