//! The instruction set the native kernels use: the best this CPU has, or
//! less where the environment variable `SKILLRET_MAX_ISA` caps it
//! (`amx`, `avx512`, `avxvnni`, `avx2` or `scalar`), so that every path can be run and tested
//! on one machine. Every dispatch point of the native engine asks
//! [`active`]; loaders call [`check`] first, which refuses an unknown value
//! (naming the allowed ones) and a cap above what the CPU has (naming what
//! it has).
//!
//! The levels: `amx` = `avx512` with AVX-512 BF16 and Intel AMX (AMX-TILE,
//! AMX-BF16, AMX-INT8 in CPUID, tile state enabled by the OS in XCR0, and
//! Linux's permission to use tile data, asked once per process: where it is
//! refused, `avx512` runs and [`amx_refused`] says why); `avx512` = AVX-512 F/BW/DQ/VL with FMA (the bf16 kernel
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
    /// AVX-512 with AVX-512 BF16 and AMX tiles (bf16 and int8 products).
    Amx,
}

impl Isa {
    /// Every level, highest first.
    pub const ALL: [Isa; 5] = [Isa::Amx, Isa::Avx512, Isa::AvxVnni, Isa::Avx2, Isa::Scalar];

    /// The name `SKILLRET_MAX_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::AvxVnni => "avxvnni",
            Self::Avx512 => "avx512",
            Self::Amx => "amx",
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
                Self::Amx => {
                    Self::Avx512.available()
                        && std::is_x86_feature_detected!("avx512bf16")
                        && amx::usable().is_ok()
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

/// Whether the AMX kernels may run (the `amx` level is active).
pub fn amx() -> bool {
    active() >= Isa::Amx
}

/// Why this CPU's AMX tiles cannot be used, where it has them (the OS does
/// not enable their state, or Linux refused the permission): `None` on a
/// CPU without AMX, and where they can be used. Device lines name it.
pub fn amx_refused() -> Option<&'static str> {
    match amx::usable() {
        Err(amx::Unusable::Refused(why)) => Some(why),
        _ => None,
    }
}

/// AMX detection: CPUID, XCR0, and Linux's permission to use tile data.
mod amx {
    use std::sync::OnceLock;

    /// Why AMX cannot run here.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Unusable {
        /// The CPU has no AMX (or not every part the kernels use).
        Absent,
        /// The CPU has it, but this process may not use it.
        Refused(&'static str),
    }

    /// Whether this process may run tile instructions: checked once, and
    /// the permission asked once (Linux grants tile data per process).
    pub(super) fn usable() -> Result<(), Unusable> {
        static USABLE: OnceLock<Result<(), Unusable>> = OnceLock::new();
        *USABLE.get_or_init(check)
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn check() -> Result<(), Unusable> {
        use std::arch::x86_64::__cpuid_count;
        // CPUID leaf 7, sub-leaf 0, EDX: bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
        // Leaf 7 is read only where the highest leaf reaches it.
        let max = __cpuid_count(0, 0).eax;
        let edx = if max >= 7 { __cpuid_count(7, 0).edx } else { 0 };
        let needed = (1 << 22) | (1 << 24) | (1 << 25);
        if edx & needed != needed || !std::is_x86_feature_detected!("xsave") {
            return Err(Unusable::Absent);
        }
        // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves tile state.
        // SAFETY: the CPU has XSAVE (checked above), hence XGETBV.
        let xcr0 = unsafe { xcr0() };
        if xcr0 & (0b11 << 17) != 0b11 << 17 {
            return Err(Unusable::Refused(
                "the operating system does not enable AMX tile state (XCR0)",
            ));
        }
        // arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): without it the
        // first tile instruction raises SIGILL.
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a plain system call with integer arguments.
        let granted = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        if granted != 0 {
            return Err(Unusable::Refused(
                "Linux refused the permission to use AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM)",
            ));
        }
        Ok(())
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    fn check() -> Result<(), Unusable> {
        Err(Unusable::Absent)
    }

    /// XCR0, the OS-enabled state components.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[target_feature(enable = "xsave")]
    unsafe fn xcr0() -> u64 {
        // SAFETY: the caller's contract (XSAVE, hence XGETBV, is present).
        unsafe { std::arch::x86_64::_xgetbv(0) }
    }
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
        let sapphire_rapids = [Amx, Avx512, AvxVnni, Avx2, Scalar];
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
        assert_eq!(resolve(None, &sapphire_rapids), Ok(Amx));
        assert_eq!(resolve(Some("amx"), &sapphire_rapids), Ok(Amx));
        // avx512 caps AMX off.
        assert_eq!(resolve(Some("avx512"), &sapphire_rapids), Ok(Avx512));
        let err = resolve(Some("amx"), &zen4).unwrap_err();
        assert!(
            err.contains("above") && err.contains("(avx512, avx2, scalar)"),
            "{err}"
        );
        let err = resolve(Some("sse4"), &zen4).unwrap_err();
        assert!(
            err.contains(ENV)
                && err.contains("\"sse4\"")
                && err.contains("amx, avx512, avxvnni, avx2, scalar"),
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
        assert!(Scalar < Avx2 && Avx2 < AvxVnni && AvxVnni < Avx512 && Avx512 < Amx);
        // A CPU with usable AMX has the avx512 level below it, and nothing is refused.
        if Amx.available() {
            assert!(Avx512.available() && amx_refused().is_none());
        }
        assert!(active() <= Isa::detected() && active().available());
        assert!(Isa::on_this_cpu().contains(&Scalar));
        assert_eq!(Isa::on_this_cpu()[0], Isa::detected());
    }
}
