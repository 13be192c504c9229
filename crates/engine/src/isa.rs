//! The instruction set the native kernels use: the best this CPU has, or
//! less where the environment variable `SKILLRET_MAX_ISA` caps it
//! (`avx512`, `avxvnni`, `avx2` or `scalar`), so that every path can be run and tested
//! on one machine. Every dispatch point of the native engine asks
//! [`active`]; loaders call [`check`] first, which refuses an unknown value
//! (naming the allowed ones) and a cap above what the CPU has (naming what
//! it has).
//!
//! The levels: `avx512` = AVX-512 F/BW/DQ/VL with FMA (the bf16 kernel
//! needs AVX-512 BF16 on top; int8 runs `vpdpbusd` on 512 bits where the
//! CPU has AVX-512 VNNI, else the best 256-bit int8 kernel it has);
//! `avxvnni` = AVX2 with FMA and AVX-VNNI (`vpdpbusd` on 256 bits, Intel
//! client CPUs since Alder Lake, AMD Zen 5); `avx2` = AVX2 with FMA (int8
//! through `vpmaddubsw`/`vpmaddwd`); `scalar` = no vector extension beyond
//! the target's baseline (SSE2 on x86_64; the portable code paths, also
//! what a non-x86 build runs, where int8 and bf16 fall back to f32). A CPU
//! may have a level without the one below it (AVX-512 without AVX-VNNI):
//! a cap must name a level the CPU has. The candle engine (the CUDA path
//! and its CPU check) is not capped.

use std::sync::OnceLock;

use crate::{Error, Result};

/// The environment variable that caps the instruction set.
pub const ENV: &str = "SKILLRET_MAX_ISA";

/// An instruction-set level of the native kernels, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// The target's baseline (portable code).
    Scalar,
    /// AVX2 with FMA.
    Avx2,
    /// AVX2 with FMA and AVX-VNNI.
    AvxVnni,
    /// AVX-512 F, BW, DQ, VL with FMA.
    Avx512,
}

impl Isa {
    /// Every level, highest first.
    pub const ALL: [Isa; 4] = [Isa::Avx512, Isa::AvxVnni, Isa::Avx2, Isa::Scalar];

    /// The name `SKILLRET_MAX_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::AvxVnni => "avxvnni",
            Self::Avx512 => "avx512",
        }
    }

    /// Whether this CPU has the level's instructions.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                || std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
            match self {
                Self::Scalar => true,
                Self::Avx2 => avx2(),
                Self::AvxVnni => avx2() && std::is_x86_feature_detected!("avxvnni"),
                Self::Avx512 => {
                    avx2()
                        && std::is_x86_feature_detected!("avx512f")
                        && std::is_x86_feature_detected!("avx512bw")
                        && std::is_x86_feature_detected!("avx512dq")
                        && std::is_x86_feature_detected!("avx512vl")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Self::Scalar
        }
    }

    /// Every level this CPU has, highest first.
    pub fn on_this_cpu() -> Vec<Isa> {
        Self::ALL.into_iter().filter(|l| l.available()).collect()
    }

    /// The best level this CPU has.
    pub fn detected() -> Isa {
        Self::ALL
            .into_iter()
            .find(|l| l.available())
            .unwrap_or(Isa::Scalar)
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|isa| isa.name() == s)
            .ok_or_else(|| {
                format!(
                    "{s:?} is not an instruction set (allowed: {})",
                    names(&Self::ALL)
                )
            })
    }
}

fn names(levels: &[Isa]) -> String {
    levels
        .iter()
        .map(|l| l.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The level a cap (`value` of `SKILLRET_MAX_ISA`, if set) gives on a CPU
/// that has the levels `has` (highest first; `scalar` always).
pub fn resolve(value: Option<&str>, has: &[Isa]) -> std::result::Result<Isa, String> {
    let best = has.first().copied().unwrap_or(Isa::Scalar);
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(best);
    };
    let cap: Isa = value.parse().map_err(|e| format!("{ENV}: {e}"))?;
    if cap > best {
        return Err(format!(
            "{ENV}: {cap} is above what this CPU has ({})",
            names(has)
        ));
    }
    if !has.contains(&cap) {
        return Err(format!(
            "{ENV}: this CPU has no {cap} (it has {})",
            names(has)
        ));
    }
    Ok(cap)
}

fn resolved() -> &'static std::result::Result<Isa, String> {
    static LEVEL: OnceLock<std::result::Result<Isa, String>> = OnceLock::new();
    LEVEL.get_or_init(|| {
        let value = std::env::var(ENV).ok();
        resolve(value.as_deref(), &Isa::on_this_cpu())
    })
}

/// The level the native kernels run at, checked: an error where
/// `SKILLRET_MAX_ISA` is unknown or above the CPU. Read once per process.
pub fn check() -> Result<Isa> {
    resolved().clone().map_err(Error::Invalid)
}

/// The level the native kernels run at (the CPU's best where
/// `SKILLRET_MAX_ISA` is invalid: loaders refuse that case through
/// [`check`] before any kernel runs).
pub fn active() -> Isa {
    match resolved() {
        Ok(isa) => *isa,
        Err(_) => Isa::detected(),
    }
}

/// Whether the AVX-512 kernels may run.
pub fn avx512() -> bool {
    active() >= Isa::Avx512
}

/// Whether the kernels of `level` may run: the active level is at least
/// `level` and the CPU has it (a CPU may have AVX-512 without AVX-VNNI).
pub fn allows(level: Isa) -> bool {
    active() >= level && level.available()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_is_parsed_checked_and_applied() {
        use Isa::*;
        let zen4 = [Avx512, Avx2, Scalar];
        let alder_lake = [AvxVnni, Avx2, Scalar];
        let haswell = [Avx2, Scalar];
        assert_eq!(resolve(None, &zen4), Ok(Avx512));
        assert_eq!(resolve(Some(""), &haswell), Ok(Avx2));
        assert_eq!(resolve(Some("avx2"), &zen4), Ok(Avx2));
        assert_eq!(resolve(Some("avx2"), &alder_lake), Ok(Avx2));
        assert_eq!(resolve(Some("avxvnni"), &alder_lake), Ok(AvxVnni));
        assert_eq!(resolve(Some("scalar"), &haswell), Ok(Scalar));
        assert_eq!(resolve(Some("avx512"), &zen4), Ok(Avx512));
        assert_eq!(resolve(Some(" avx2 "), &zen4), Ok(Avx2));
        let err = resolve(Some("sse4"), &zen4).unwrap_err();
        assert!(
            err.contains(ENV)
                && err.contains("\"sse4\"")
                && err.contains("avx512, avxvnni, avx2, scalar"),
            "{err}"
        );
        let err = resolve(Some("avx512"), &haswell).unwrap_err();
        assert!(
            err.contains("above") && err.contains("(avx2, scalar)"),
            "{err}"
        );
        // Below the best level, but not on this CPU.
        let err = resolve(Some("avxvnni"), &zen4).unwrap_err();
        assert!(
            err.contains("no avxvnni") && err.contains("avx512, avx2, scalar"),
            "{err}"
        );
        assert!(Scalar < Avx2 && Avx2 < AvxVnni && AvxVnni < Avx512);
        assert!(active() <= Isa::detected() && active().available());
        assert!(Isa::on_this_cpu().contains(&Scalar));
        assert_eq!(Isa::on_this_cpu()[0], Isa::detected());
    }
}
