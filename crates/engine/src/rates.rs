//! The rate of each arithmetic unit of this CPU, and what the engine picks
//! from it.
//!
//! [`peak_gops`] measures an instruction's peak over all of rayon's threads
//! (`examples/bench_linear`). [`of_this_cpu`] is what the engine chooses by,
//! per thread: 256-bit and 512-bit f32 FMA and AVX-512 BF16's `vdpbf16ps`.
//! f32 products run through the `gemm` crate's AVX-512 kernels only where
//! 512-bit FMA is wide (about twice 256-bit; CPUs that split 512-bit
//! operations in two run this crate's AVX2 panels faster); int8's kept
//! layers run in bf16 only where bf16 is the faster unit; `--precision bf16`
//! on a CPU whose bf16 is slower says so. On some CPUs bf16 runs at twice
//! the f32 rate, on others at half: the rates are measured once (about 0.3
//! s), cached per CPU model and level in `unit-rates.json` of the cache
//! directory ([`CACHE_ENV`], else `$XDG_CACHE_HOME/skillret`, else
//! `~/.cache/skillret`), or given outright in [`ENV`]
//! (`fma256=119.4,fma512=238.7,bf16=119.8`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use crate::isa::Isa;
use crate::{Error, Precision, Result};

/// The environment variable that gives the unit rates instead of measuring
/// them: `fma256=GOPS[,fma512=GOPS][,bf16=GOPS][,amx=GOPS]` (10⁹ operations per second
/// on one thread; a unit left out is one the CPU lacks).
pub const ENV: &str = "SKILLRET_UNIT_RATES";

/// The environment variable that names the cache file of measured rates
/// (an empty value: no cache).
pub const CACHE_ENV: &str = "SKILLRET_RATES_CACHE";

/// 512-bit FMA must run this much faster than 256-bit FMA for the `gemm`
/// crate's AVX-512 f32 kernels to be used: below it (CPUs that split 512-bit
/// operations in two) this crate's AVX2 panels are the faster f32 path.
const WIDE_FMA: f64 = 1.3;

/// The per-thread rates, in 10⁹ operations per second (a multiply-add is
/// two), of the units the engine chooses between.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UnitRates {
    /// f32 FMA on 256-bit registers (`vfmadd231ps`, AVX2).
    pub fma256: f64,
    /// f32 FMA on 512-bit registers (`None`: below the avx512 level).
    pub fma512: Option<f64>,
    /// AVX-512 BF16's `vdpbf16ps` (`None`: not at the active level).
    pub bf16: Option<f64>,
    /// AMX's `tdpbf16ps` (`None`: not at the active level): where there is
    /// one, bf16 products run on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amx: Option<f64>,
}

impl UnitRates {
    /// Whether f32 products run through the `gemm` crate's AVX-512 kernels:
    /// where 512-bit FMA runs at least 1.3× 256-bit FMA (full-width AVX-512);
    /// elsewhere through this crate's AVX2 panels.
    pub fn wide_fma(&self) -> bool {
        self.fma512
            .is_some_and(|wide| wide >= WIDE_FMA * self.fma256)
    }

    /// The rate f32 products run at: the unit [`UnitRates::wide_fma`] picks.
    pub fn f32(&self) -> f64 {
        match self.fma512 {
            Some(wide) if self.wide_fma() => wide,
            _ => self.fma256,
        }
    }

    /// The rate bf16 products run at: AMX's tiles where the level has them,
    /// else `vdpbf16ps`.
    pub fn bf16(&self) -> Option<f64> {
        self.amx.or(self.bf16)
    }

    /// Whether bf16 products run faster than f32 ones here.
    pub fn bf16_faster(&self) -> bool {
        self.bf16().is_some_and(|bf16| bf16 > self.f32())
    }

    /// This CPU's bf16 and f32 rates where its bf16 unit is known and not
    /// the faster one.
    pub fn bf16_slower(&self) -> Option<(f64, f64)> {
        self.bf16()
            .filter(|_| !self.bf16_faster())
            .map(|bf16| (bf16, self.f32()))
    }

    /// Reads [`ENV`]'s form.
    pub fn parse(value: &str) -> Result<Self> {
        let bad = |why: String| {
            Error::Invalid(format!(
                "{ENV}={value:?}: {why} (expected fma256=GOPS[,fma512=GOPS][,bf16=GOPS][,amx=GOPS], \
                 e.g. fma256=119.4,fma512=238.7,bf16=119.8)"
            ))
        };
        let (mut fma256, mut fma512, mut bf16, mut amx) = (None, None, None, None);
        for part in value.split(',') {
            let (unit, rate) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not unit=rate")))?;
            let rate: f64 = rate
                .trim()
                .parse()
                .ok()
                .filter(|r: &f64| r.is_finite() && *r > 0.0)
                .ok_or_else(|| bad(format!("{rate:?} is not a positive rate")))?;
            match unit.trim() {
                "fma256" => fma256 = Some(rate),
                "fma512" => fma512 = Some(rate),
                "bf16" => bf16 = Some(rate),
                "amx" => amx = Some(rate),
                other => {
                    return Err(bad(format!(
                        "{other:?} is not a unit (fma256, fma512, bf16, amx)"
                    )));
                }
            }
        }
        let fma256 = fma256.ok_or_else(|| bad("fma256 is needed".into()))?;
        Ok(Self {
            fma256,
            fma512,
            bf16,
            amx,
        })
    }

    /// Measures the units of the active level on this thread (`None` below
    /// avx2: there is nothing to choose).
    pub fn measure() -> Option<Self> {
        if !crate::isa::allows(Isa::Avx2) {
            return None;
        }
        let avx512 = crate::isa::avx512();
        Some(Self {
            fma256: rate_on_this_thread(Instruction::Avx2Fma)?,
            fma512: if avx512 {
                rate_on_this_thread(Instruction::Avx512Fma)
            } else {
                None
            },
            bf16: if crate::bf16::supported() {
                rate_on_this_thread(Instruction::Avx512Bf16)
            } else {
                None
            },
            amx: if crate::amx::supported() {
                rate_on_this_thread(Instruction::AmxBf16)
            } else {
                None
            },
        })
    }

    /// The units the active level lacks, dropped (given rates may name
    /// units the level cannot run).
    fn at_this_level(mut self) -> Self {
        if !crate::isa::avx512() {
            self.fma512 = None;
        }
        if !crate::bf16::supported() {
            self.bf16 = None;
        }
        if !crate::amx::supported() {
            self.amx = None;
        }
        self
    }
}

/// This CPU's [`UnitRates`] at the active level (`None` below avx2):
/// [`ENV`]'s, else the cache's for this CPU model and level, else measured
/// and cached. Once per process.
pub fn of_this_cpu() -> Result<Option<UnitRates>> {
    static RATES: OnceLock<Result<Option<UnitRates>, String>> = OnceLock::new();
    RATES
        .get_or_init(|| {
            // A given value is checked on every CPU, used where there is a choice.
            let given = match std::env::var(ENV) {
                Ok(value) => Some(UnitRates::parse(&value).map_err(|e| e.to_string())?),
                Err(_) => None,
            };
            if !crate::isa::allows(Isa::Avx2) {
                return Ok(None);
            }
            Ok(given
                .map(UnitRates::at_this_level)
                .or_else(|| cached_or_measured(cache_file())))
        })
        .clone()
        .map_err(Error::Invalid)
}

/// Whether f32 products run through the `gemm` crate's AVX-512 kernels (at
/// the avx512 level, on a CPU with full-width 512-bit FMA: see
/// [`UnitRates::wide_fma`]); elsewhere through this crate's panels. Loaders
/// check [`of_this_cpu`] first; rates that cannot be read count as wide.
pub fn f32_in_gemm() -> bool {
    static GEMM: OnceLock<bool> = OnceLock::new();
    *GEMM.get_or_init(|| {
        crate::isa::avx512() && of_this_cpu().ok().flatten().is_none_or(|r| r.wide_fma())
    })
}

/// The cache file of measured rates (`None`: no cache).
fn cache_file() -> Option<PathBuf> {
    match std::env::var_os(CACHE_ENV) {
        Some(path) if path.is_empty() => None,
        Some(path) => Some(PathBuf::from(path)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("skillret").join("unit-rates.json")),
    }
}

/// This CPU's model name (`/proc/cpuinfo`'s first `model name`; `None`
/// where there is none).
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|l| {
        l.strip_prefix("model name")?
            .split_once(':')
            .map(|(_, m)| m.trim().to_owned())
    })
}

/// The cache's key: the CPU model and the active level.
fn cache_key() -> String {
    let model = cpu_model().unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{model} | {}", crate::isa::active())
}

/// The cached rates of this CPU, or measured ones written to the cache (a
/// cache that cannot be read is measured over; one that cannot be written
/// is left as it is: the rates are then measured again by the next process).
fn cached_or_measured(file: Option<PathBuf>) -> Option<UnitRates> {
    let key = cache_key();
    let mut cache: BTreeMap<String, UnitRates> = file
        .as_ref()
        .and_then(|f| std::fs::read(f).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    // An entry is used where it has every unit the level runs (one written
    // before a unit was measured is measured over).
    if let Some(rates) = cache
        .get(&key)
        .filter(|r| r.amx.is_some() == crate::amx::supported())
    {
        return Some(*rates);
    }
    let rates = UnitRates::measure()?;
    if let Some(file) = file {
        cache.insert(key, rates);
        let _ = write_atomically(&file, &cache);
    }
    Some(rates)
}

/// Writes `cache` to a temporary file beside `file`, then renames it over.
fn write_atomically(
    file: &std::path::Path,
    cache: &BTreeMap<String, UnitRates>,
) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("json.{}.tmp", std::process::id()));
    let json = serde_json::to_vec_pretty(cache).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, file)
}

/// `instruction`'s rate on the calling thread: the loop grown until it
/// takes 10 ms (which also ramps the clock up), then the best of three.
fn rate_on_this_thread(instruction: Instruction) -> Option<f64> {
    let mut iterations = 100_000;
    loop {
        let (ops, seconds) = timed(instruction, iterations)?;
        if seconds >= 0.01 || iterations >= 1 << 30 {
            let best = (0..3)
                .filter_map(|_| timed(instruction, iterations))
                .map(|(ops, s)| ops / s)
                .fold(ops / seconds, f64::max);
            // To 0.1 GOP/s: more digits are noise, and these survive the cache's JSON.
            return Some((best / 1e8).round() / 10.0);
        }
        iterations *= 4;
    }
}

/// Operations and seconds of `iterations` of `instruction`'s loop here.
fn timed(instruction: Instruction, iterations: usize) -> Option<(f64, f64)> {
    if !instruction.available() {
        return None;
    }
    let start = Instant::now();
    std::hint::black_box(run_loop(instruction, iterations)?);
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    Some((
        instruction.operations_per_iteration() * iterations as f64,
        seconds,
    ))
}

/// Independent accumulators per thread in the peak loops (more than the
/// instruction's latency times its issue rate, so the loop is bound by
/// throughput alone). Sixteen made the compiler keep some of them on the
/// stack (a store and reload in their chains), which halved the measured
/// 512-bit peaks on a CPU with full-width AVX-512 (263 instead of 481
/// GFLOP/s here); twelve stay in registers.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const CHAINS: usize = 12;

/// An instruction a kernel of the native engine is built on, whose peak
/// rate [`peak_gops`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instruction {
    /// `vfmadd231ps` on 512-bit registers (f32 at the avx512 level): 32
    /// operations each.
    Avx512Fma,
    /// `vfmadd231ps` on 256-bit registers (f32 at the avx2 level): 16.
    Avx2Fma,
    /// `vdpbf16ps` on 512-bit registers (bf16): 64.
    Avx512Bf16,
    /// `vpdpbusd` on 512-bit registers (int8, AVX-512 VNNI): 128.
    Avx512Vnni,
    /// `vpdpbusd` on 256-bit registers (int8, AVX-VNNI): 64.
    AvxVnni,
    /// AMX's `tdpbf16ps` (16 × 16 × 32 multiply-adds): 16,384.
    AmxBf16,
    /// AMX's `tdpbusd` (16 × 16 × 64 multiply-adds): 32,768.
    AmxInt8,
    /// The AVX2 int8 step without VNNI: `vpsignb`, `vpmaddubsw`,
    /// `vpmaddwd`, `vpaddd` on 256-bit registers (32 multiply-adds of
    /// bytes into eight i32 sums, as the int8 kernel does them): 64.
    Avx2Int8,
}

impl Instruction {
    /// Every instruction, in the order reports list them.
    pub const ALL: [Instruction; 8] = [
        Instruction::Avx512Fma,
        Instruction::Avx2Fma,
        Instruction::Avx512Bf16,
        Instruction::Avx512Vnni,
        Instruction::AvxVnni,
        Instruction::Avx2Int8,
        Instruction::AmxBf16,
        Instruction::AmxInt8,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Fma => "avx512 fma",
            Self::Avx2Fma => "avx2 fma",
            Self::Avx512Bf16 => "avx512 bf16",
            Self::Avx512Vnni => "avx512 vnni",
            Self::AvxVnni => "avx-vnni",
            Self::Avx2Int8 => "avx2 int8",
            Self::AmxBf16 => "amx bf16",
            Self::AmxInt8 => "amx int8",
        }
    }

    /// Whether this CPU has it (whatever `SKILLRET_MAX_ISA` says: peaks
    /// are the CPU's).
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let detected = crate::isa::Isa::detected();
            match self {
                Self::Avx512Fma => detected >= crate::isa::Isa::Avx512,
                Self::Avx2Fma => detected >= crate::isa::Isa::Avx2,
                Self::Avx512Bf16 => {
                    detected >= crate::isa::Isa::Avx512
                        && std::is_x86_feature_detected!("avx512bf16")
                }
                Self::Avx512Vnni => crate::int8::Kernel::Avx512Vnni.on_this_cpu(),
                Self::AvxVnni => crate::int8::Kernel::AvxVnni.on_this_cpu(),
                Self::Avx2Int8 => crate::int8::Kernel::Avx2.on_this_cpu(),
                Self::AmxBf16 | Self::AmxInt8 => crate::isa::Isa::Amx.available(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Arithmetic operations per iteration of its peak loop (per
    /// instruction, times the loop's chains).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn operations_per_iteration(self) -> f64 {
        let (operations, chains) = match self {
            Self::Avx512Fma => (32.0, CHAINS),
            Self::Avx2Fma => (16.0, CHAINS_256),
            Self::Avx512Bf16 => (64.0, CHAINS),
            Self::Avx512Vnni => (128.0, CHAINS),
            Self::AvxVnni => (64.0, CHAINS_256),
            Self::Avx2Int8 => (64.0, CHAINS_AVX2_INT8),
            // Four tile products per iteration.
            Self::AmxBf16 => (2.0 * 16.0 * 16.0 * 32.0, 4),
            Self::AmxInt8 => (2.0 * 16.0 * 16.0 * 64.0, 4),
        };
        operations * chains as f64
    }

    /// The instruction the dense layers of `precision` run on at the active
    /// level (`None`: the portable code, which has no single instruction).
    pub fn of(precision: Precision) -> Option<Self> {
        let level = crate::isa::active();
        match precision.on_this_cpu() {
            Precision::Bf16 if crate::amx::supported() => Some(Self::AmxBf16),
            Precision::Bf16 => Some(Self::Avx512Bf16),
            Precision::Int8 if crate::amx::supported() => Some(Self::AmxInt8),
            Precision::Int8 => crate::int8::Kernel::active().map(|k| match k {
                crate::int8::Kernel::Avx512Vnni => Self::Avx512Vnni,
                crate::int8::Kernel::AvxVnni => Self::AvxVnni,
                crate::int8::Kernel::Avx2 => Self::Avx2Int8,
            }),
            Precision::F32 if f32_in_gemm() => Some(Self::Avx512Fma),
            Precision::F32 if level >= crate::isa::Isa::Avx2 => Some(Self::Avx2Fma),
            Precision::F32 => None,
        }
    }
}

/// The peak rate, in 10⁹ arithmetic operations per second over all of
/// rayon's threads, of `instruction` in `CHAINS` independent chains,
/// registers only. `None` where the CPU lacks it.
pub fn peak_gops(instruction: Instruction, iterations: usize) -> Option<f64> {
    if !instruction.available() {
        return None;
    }
    let threads = rayon::current_num_threads();
    let start = Instant::now();
    let sinks = rayon::broadcast(|_| run_loop(instruction, iterations));
    let seconds = start.elapsed().as_secs_f64();
    std::hint::black_box(sinks);
    let total = (threads * iterations) as f64 * instruction.operations_per_iteration();
    Some(total / seconds / 1e9)
}

/// `iterations` of `instruction`'s peak loop on this thread (`None` where
/// the CPU lacks it); the result only keeps the loop from being dropped.
fn run_loop(instruction: Instruction, iterations: usize) -> Option<f32> {
    if !instruction.available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has the instruction (checked above).
    unsafe {
        Some(match instruction {
            Instruction::Avx512Fma => peak::fma(iterations),
            Instruction::Avx2Fma => peak::fma256(iterations),
            Instruction::Avx512Bf16 => peak::bf16(iterations),
            Instruction::Avx512Vnni => peak::int8(iterations),
            Instruction::AvxVnni => peak::int8_256(iterations),
            Instruction::Avx2Int8 => peak::int8_avx2(iterations),
            // The tile unit's loop runs where this process may use AMX,
            // whatever the cap.
            Instruction::AmxBf16 | Instruction::AmxInt8 => {
                if !crate::isa::Isa::Amx.available() {
                    return None;
                }
                crate::amx::peak_loop(instruction == Instruction::AmxInt8, iterations);
                0.0
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = iterations;
        None
    }
}

/// Chains of the 256-bit loops: AVX2 has 16 registers, two of which hold
/// the operands (16 chains would spill).
const CHAINS_256: usize = 12;

/// Chains of the AVX2 int8 loop: each needs its state and one temporary,
/// plus `|a|` and the ones.
const CHAINS_AVX2_INT8: usize = 10;

#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;

    use super::{CHAINS, CHAINS_256, CHAINS_AVX2_INT8};

    /// Sums the chains' first lanes, so the loop cannot be dropped.
    fn sink(lanes: &[f32]) -> f32 {
        lanes.iter().sum()
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fma(iterations: usize) -> f32 {
        let a = _mm512_set1_ps(1e-7);
        let b = std::hint::black_box(_mm512_set1_ps(1.0));
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm512_fmadd_ps(a, b, *acc);
            }
        }
        let firsts: Vec<f32> = acc.iter().map(|v| _mm512_reduce_add_ps(*v)).collect();
        sink(&firsts)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma256(iterations: usize) -> f32 {
        let a = _mm256_set1_ps(1e-7);
        let b = std::hint::black_box(_mm256_set1_ps(1.0));
        let mut acc = [_mm256_setzero_ps(); CHAINS_256];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm256_fmadd_ps(a, b, *acc);
            }
        }
        let mut firsts = [0.0f32; CHAINS_256];
        for (f, v) in firsts.iter_mut().zip(&acc) {
            *f = _mm256_cvtss_f32(*v);
        }
        sink(&firsts)
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn bf16(iterations: usize) -> f32 {
        // SAFETY: 512-bit vectors of the same size, reinterpreted.
        let (a, b): (__m512bh, __m512bh) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi16(0x3380)), // 2^-24
                std::mem::transmute::<__m512i, __m512bh>(std::hint::black_box(_mm512_set1_epi16(
                    0x3f80,
                ))), // 1.0
            )
        };
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm512_dpbf16_ps(*acc, a, b);
            }
        }
        let firsts: Vec<f32> = acc.iter().map(|v| _mm512_reduce_add_ps(*v)).collect();
        sink(&firsts)
    }

    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn int8_256(iterations: usize) -> f32 {
        let a = _mm256_set1_epi8(1);
        let b = std::hint::black_box(_mm256_set1_epi8(1));
        let mut acc = [_mm256_setzero_si256(); CHAINS_256];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm256_dpbusd_avx_epi32(*acc, a, b);
            }
        }
        let mut firsts = [0.0f32; CHAINS_256];
        for (f, v) in firsts.iter_mut().zip(&acc) {
            *f = _mm256_cvtsi256_si32(*v) as f32;
        }
        sink(&firsts)
    }

    /// Each chain's state is the signed operand of its next step, so no
    /// step can be hoisted and every one of its four instructions runs.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn int8_avx2(iterations: usize) -> f32 {
        let a = std::hint::black_box(_mm256_set1_epi8(3));
        let magnitude = _mm256_abs_epi8(a);
        let ones = _mm256_set1_epi16(1);
        let mut acc: [__m256i; CHAINS_AVX2_INT8] =
            std::array::from_fn(|i| _mm256_set1_epi8(i as i8 - 5));
        for _ in 0..iterations {
            for acc in &mut acc {
                let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(*acc, a));
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(pairs, ones));
            }
        }
        let mut firsts = [0.0f32; CHAINS_AVX2_INT8];
        for (f, v) in firsts.iter_mut().zip(&acc) {
            *f = _mm256_cvtsi256_si32(*v) as f32;
        }
        sink(&firsts)
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn int8(iterations: usize) -> f32 {
        let a = _mm512_set1_epi8(1);
        let b = std::hint::black_box(_mm512_set1_epi8(1));
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm512_dpbusd_epi32(*acc, a, b);
            }
        }
        let firsts: Vec<f32> = acc
            .iter()
            .map(|v| _mm512_reduce_add_epi32(*v) as f32)
            .collect();
        sink(&firsts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_instruction_this_cpu_has_has_a_peak() {
        for instruction in Instruction::ALL {
            let peak = peak_gops(instruction, 1000);
            if instruction.available() {
                assert!(peak.is_some_and(|p| p > 0.0), "{instruction:?}: {peak:?}");
            } else {
                assert_eq!(peak, None);
            }
        }
        // Each path names an instruction this CPU has, except the portable code.
        for precision in [Precision::F32, Precision::Bf16, Precision::Int8] {
            match Instruction::of(precision) {
                Some(i) => assert!(i.available(), "{precision:?}: {i:?}"),
                None => assert_eq!(crate::isa::active(), crate::isa::Isa::Scalar),
            }
        }
    }

    #[test]
    fn rates_are_given_in_one_form() {
        let r = UnitRates::parse("fma256=119.4, fma512=238.7,bf16=119.8").expect("valid");
        let want = UnitRates {
            fma256: 119.4,
            fma512: Some(238.7),
            bf16: Some(119.8),
            amx: None,
        };
        assert_eq!(r, want);
        // Full-width AVX-512 with a half-rate bf16 unit: gemm's f32, bf16 slower.
        assert!(r.wide_fma() && !r.bf16_faster());
        assert_eq!(r.f32(), 238.7);
        assert_eq!(r.bf16_slower(), Some((119.8, 238.7)));
        // 512-bit operations split in two (the same rate): the AVX2 panels.
        let split = UnitRates::parse("fma256=117.4,fma512=117.4,bf16=234.9").expect("valid");
        assert!(!split.wide_fma() && split.bf16_faster());
        assert_eq!((split.f32(), split.bf16_slower()), (117.4, None));
        let avx2 = UnitRates::parse("fma256=120").expect("valid");
        assert!(!avx2.wide_fma() && !avx2.bf16_faster() && avx2.bf16_slower().is_none());
        // AMX's tiles run bf16 where the level has them, whatever vdpbf16ps does.
        let amx = UnitRates::parse("fma256=114.6,fma512=219,bf16=109.9,amx=3700").expect("valid");
        assert!(amx.bf16_faster() && amx.bf16_slower().is_none());
        assert_eq!(amx.bf16(), Some(3700.0));
        for bad in [
            "bf16=1",
            "fma256=0",
            "fma256=1,bf16=x",
            "fma256=1,int8=2",
            "fma256",
        ] {
            let e = UnitRates::parse(bad).expect_err(bad).to_string();
            assert!(e.starts_with(&format!("{ENV}=")), "{e}");
            assert!(
                e.contains("expected fma256=GOPS[,fma512=GOPS][,bf16=GOPS][,amx=GOPS]"),
                "{e}"
            );
        }
    }

    #[test]
    fn measured_rates_are_cached_per_cpu_and_level() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("cache").join("unit-rates.json");
        let Some(measured) = cached_or_measured(Some(file.clone())) else {
            // Below avx2: nothing to measure or cache.
            assert!(!crate::isa::allows(Isa::Avx2));
            assert!(!file.exists());
            return;
        };
        assert!(measured.fma256 > 0.0, "{measured:?}");
        assert_eq!(measured.fma512.is_some(), crate::isa::avx512());
        assert_eq!(measured.bf16.is_some(), crate::bf16::supported());
        assert_eq!(measured.amx.is_some(), crate::amx::supported());
        let read = |f: &PathBuf| -> BTreeMap<String, UnitRates> {
            serde_json::from_slice(&std::fs::read(f).expect("cache written")).expect("json")
        };
        assert_eq!(read(&file).get(&cache_key()), Some(&measured));
        // The cache is what a later process reads (not measured again).
        let planted = UnitRates {
            fma256: 1.0,
            fma512: None,
            bf16: Some(2.0),
            amx: crate::amx::supported().then_some(3.0),
        };
        let mut cache = read(&file);
        cache.insert(cache_key(), planted);
        cache.insert("another CPU | avx2".into(), planted);
        write_atomically(&file, &cache).expect("write");
        assert_eq!(cached_or_measured(Some(file.clone())), Some(planted));
        if crate::amx::supported() {
            // An entry without the tile unit's rate (written before it was
            // measured) is measured over.
            let mut cache = read(&file);
            cache.insert(
                cache_key(),
                UnitRates {
                    amx: None,
                    ..planted
                },
            );
            write_atomically(&file, &cache).expect("write");
            let again = cached_or_measured(Some(file.clone())).expect("measured");
            assert!(again.amx.is_some_and(|r| r > 3.0), "{again:?}");
            cache.insert(cache_key(), planted);
            write_atomically(&file, &cache).expect("write");
        }
        // A damaged cache is measured over and rewritten.
        std::fs::write(&file, b"{not json").expect("write");
        let again = cached_or_measured(Some(file.clone())).expect("measured");
        assert!(again.fma256 > 1.0, "{again:?}");
        assert_eq!(read(&file).get(&cache_key()), Some(&again));
        let leftovers: Vec<_> = std::fs::read_dir(file.parent().expect("dir"))
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|e| e.file_name() != "unit-rates.json")
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }
}
