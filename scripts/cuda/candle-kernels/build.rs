// skillret's build script for candle-kernels 0.11.1, put in place by scripts/build-cuda.sh (the
// crate is otherwise the registry's). candle's own build script compiles each kernel module to
// PTX for one compute capability, which the driver compiles again on first use (about 20 s on a
// fresh machine; PTX for sm_90a, arch-specific, loads on sm_90 GPUs only). This one compiles each
// module into a compressed fatbin holding SASS for every architecture of SKILLRET_CUDA_ARCHS
// (default 80,86,89,90: A100, A10/RTX 30, L4/RTX 40, H100/H200) and PTX for the newest, which the
// driver compiles only on a GPU newer than all of them. `quantized` (GGUF kernels, never used by
// skillret) gets the PTX alone. The statically linked kernels (MoE, GGUF matmuls) are built as
// candle builds them.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The modules of candle_kernels::ALL_IDS, largest first (they compile in parallel).
const MODULES: [&str; 11] = [
    "quantized",
    "binary",
    "indexing",
    "conv",
    "reduce",
    "cast",
    "unary",
    "ternary",
    "sort",
    "affine",
    "fill",
];

fn archs() -> Vec<u32> {
    let text = env::var("SKILLRET_CUDA_ARCHS").unwrap_or_else(|_| "80,86,89,90".to_owned());
    let mut archs: Vec<u32> = text
        .split(',')
        .map(|a| {
            a.trim().parse().unwrap_or_else(|_| {
                panic!("SKILLRET_CUDA_ARCHS={text:?}: {a:?} is not a compute capability such as 80 or 90")
            })
        })
        .collect();
    archs.sort_unstable();
    archs.dedup();
    assert!(!archs.is_empty(), "SKILLRET_CUDA_ARCHS is empty");
    archs
}

fn nvcc() -> PathBuf {
    ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
        .iter()
        .filter_map(|v| env::var_os(v))
        .map(|root| Path::new(&root).join("bin/nvcc"))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("nvcc"))
}

fn fatbin(nvcc: &Path, module: &str, archs: &[u32], out: &Path) {
    let newest = archs[archs.len() - 1];
    let mut cmd = Command::new(nvcc);
    cmd.args([
        "--fatbin",
        "-O3",
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "--compress-mode=size",
    ]);
    if module != "quantized" {
        for a in archs {
            cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
        }
    }
    cmd.arg(format!(
        "-gencode=arch=compute_{newest},code=compute_{newest}"
    ));
    cmd.arg("-o").arg(out.join(format!("{module}.fatbin")));
    cmd.arg(format!("src/{module}.cu"));
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", nvcc.display()));
    assert!(status.success(), "nvcc failed on src/{module}.cu: {cmd:?}");
}

fn main() -> cudaforge::Result<()> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-env-changed=SKILLRET_CUDA_ARCHS");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let archs = archs();
    let nvcc = nvcc();

    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads.min(MODULES.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(module) = MODULES.get(i) else { break };
                fatbin(&nvcc, module, &archs, &out_dir);
            });
        }
    });
    let consts: String = MODULES
        .iter()
        .map(|m| {
            format!(
                "pub const {}: &[u8] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{m}.fatbin\"));\n",
                m.to_uppercase()
            )
        })
        .collect();
    std::fs::write(out_dir.join("ptx.rs"), consts).unwrap();

    // The statically linked kernels, as candle-kernels 0.11.1 builds them.
    let mut moe_builder = cudaforge::KernelBuilder::default()
        .source_files([
            "src/moe/moe_gguf.cu",
            "src/moe/moe_wmma.cu",
            "src/moe/moe_wmma_gguf.cu",
            "src/mmvq_gguf.cu",
            "src/mmq_gguf/mmq_quantize.cu",
            "src/mmq_gguf/mmq_instance_q4_0.cu",
            "src/mmq_gguf/mmq_instance_q4_1.cu",
            "src/mmq_gguf/mmq_instance_q5_0.cu",
            "src/mmq_gguf/mmq_instance_q5_1.cu",
            "src/mmq_gguf/mmq_instance_q8_0.cu",
            "src/mmq_gguf/mmq_instance_q2_k.cu",
            "src/mmq_gguf/mmq_instance_q3_k.cu",
            "src/mmq_gguf/mmq_instance_q4_k.cu",
            "src/mmq_gguf/mmq_instance_q5_k.cu",
            "src/mmq_gguf/mmq_instance_q6_k.cu",
        ])
        .arg("--expt-relaxed-constexpr")
        .arg("-std=c++17")
        .arg("-O3")
        .arg("-Xcompiler")
        .arg("-fPIC");
    let cap = cudaforge::detect_compute_cap()
        .map(|arch| arch.base())
        .unwrap_or(80);
    if cap < 80 {
        moe_builder = moe_builder.arg("-DNO_BF16_KERNEL");
    }
    moe_builder.build_lib(out_dir.join("libmoe.a"))?;
    println!("cargo:rustc-link-search={}", out_dir.display());
    println!("cargo:rustc-link-lib=moe");
    println!("cargo:rustc-link-lib=dylib=cudart");
    println!("cargo:rustc-link-lib=stdc++");
    Ok(())
}
