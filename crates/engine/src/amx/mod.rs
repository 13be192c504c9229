//! The `amx` level's products: Intel AMX tiles (`tdpbf16ps` for [`bf16`],
//! `tdpbssd` for [`int8`]), for the Xeons of the 4th generation on.
//!
//! The instruction-set-specific part is small: one `asm!` block per
//! micro-kernel ([`bf16`]'s strip kernels: tile configuration, the shared
//! dimension's loop, stores, release), since tile registers are not kept
//! between blocks. Everything around it — packing the weights into the tile
//! layout, rounding activations, blocking for the caches, the epilogue — is
//! plain Rust, and runs on every CPU against `model`, a portable model of
//! the tile unit with the same operations, so that its indexing is tested
//! everywhere; the assembly is checked against the model on CPUs that have
//! AMX.
//!
//! Detection (CPUID, XCR0, Linux's permission) is [`crate::isa`]'s: this
//! module's kernels run only where [`supported`] says so.

pub mod bf16;
pub mod int8;
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod model;

/// Whether the AMX kernels run here: the `amx` level is active (the CPU has
/// AMX, this process may use it, and `SKILLRET_MAX_ISA` does not cap it).
pub fn supported() -> bool {
    crate::isa::amx()
}

/// Where a packed weight's tiles lie, for bf16 and int8 alike (a tile row
/// is 64 bytes of the shared dimension either way): chunk after chunk of the
/// shared dimension, in each chunk the panels of 32 outputs one after the
/// other (a group of panels' chunk is one contiguous run), in each panel its
/// k-steps, two B tiles per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// k-steps of the shared dimension.
    pub(crate) steps: usize,
    /// k-steps per chunk.
    pub(crate) chunk: usize,
    /// Panels of 32 outputs.
    pub(crate) panels: usize,
}

impl Layout {
    pub(crate) fn new(steps: usize, chunk: usize, panels: usize) -> Self {
        assert!(chunk > 0, "a chunk holds at least one k-step");
        Self {
            steps,
            chunk,
            panels,
        }
    }

    /// k-steps in all (each `step` values of the caller's type).
    pub(crate) fn len(&self) -> usize {
        self.panels * self.steps
    }

    /// Where `panel`'s k-steps of the chunk that starts at step `first`
    /// begin, counted in k-steps from the start, and how many there are.
    pub(crate) fn run(&self, first: usize, panel: usize) -> (usize, usize) {
        let len = self.chunk.min(self.steps - first);
        (first * self.panels + panel * len, len)
    }

    /// `data` (the layout's k-steps of `step` values each) cut into its
    /// runs, in order: (first k-step of the chunk, panel, the panel's run).
    pub(crate) fn runs<'a, T>(
        &self,
        mut data: &'a mut [T],
        step: usize,
    ) -> Vec<(usize, usize, &'a mut [T])> {
        let mut runs = Vec::with_capacity(self.panels * self.steps.div_ceil(self.chunk));
        for first in (0..self.steps).step_by(self.chunk) {
            let len = self.chunk.min(self.steps - first);
            for panel in 0..self.panels {
                let (run, tail) = data.split_at_mut(len * step);
                runs.push((first, panel, run));
                data = tail;
            }
        }
        runs
    }
}

/// A zeroed buffer whose start is 64-byte aligned: a tile row that
/// straddles two cache lines loads about six times slower (measured: 51
/// cycles per 16-row `tileloadd` against 8).
pub(crate) struct Aligned<T: Plain> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: the buffer owns its values, as a Vec would.
unsafe impl<T: Plain + Send> Send for Aligned<T> {}
// SAFETY: as above.
unsafe impl<T: Plain + Sync> Sync for Aligned<T> {}

/// Values for which all-zero bytes are a valid value, and any bytes too.
pub(crate) trait Plain: Copy {}
impl Plain for u8 {}
impl Plain for i8 {}
impl Plain for u16 {}
impl Plain for i32 {}
impl Plain for f32 {}

impl<T: Plain> Aligned<T> {
    fn layout(len: usize) -> std::alloc::Layout {
        let bytes = (len * std::mem::size_of::<T>()).max(1).next_multiple_of(64);
        std::alloc::Layout::from_size_align(bytes, 64).expect("a buffer's size")
    }

    /// `len` zeros (from the allocator's zeroed pages: no pass over them).
    pub(crate) fn zeroed(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = std::ptr::NonNull::new(ptr.cast::<T>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        Self { ptr, len }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: the allocation holds `len` values, aligned for any `T`
        // up to 64 bytes, initialised (zero bytes are a valid `T`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as `as_slice`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Plain> Drop for Aligned<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) };
    }
}

impl<T: Plain> std::fmt::Debug for Aligned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aligned").field("len", &self.len).finish()
    }
}

/// The tile unit's peak: `iterations` of four independent `tdpbf16ps`
/// (`int8`: `tdpbusd`) into four accumulators, on operand tiles loaded
/// once, no memory traffic in the loop. Operations per iteration: 65,536
/// (bf16) or 131,072 (int8). Only where this process may use AMX
/// (whatever `SKILLRET_MAX_ISA` says: peaks are the CPU's).
#[cfg(target_arch = "x86_64")]
pub(crate) fn peak_loop(int8: bool, iterations: usize) {
    assert!(crate::isa::Isa::Amx.available() && iterations > 0);
    static CONFIG: model::Config = model::Config::new([16; 8], [64; 8]);
    // Operands of ones (bf16 1.0 or int8 1), 64-byte aligned.
    let mut operands = Aligned::<u16>::zeroed(1024);
    let one = if int8 { 0x0101 } else { 0x3f80 };
    operands.as_mut_slice().fill(one);
    let p = operands.as_slice().as_ptr();
    // Four independent products in flight, `iterations` times.
    macro_rules! peak {
        ($op:literal) => {
            // SAFETY: AMX runs here (asserted); the operand tiles are read
            // from 2 KiB inside `operands` with a stride of 64 bytes; the
            // block loads its configuration and releases the tiles.
            unsafe {
                std::arch::asm!(
                    "ldtilecfg [{cfg}]",
                    "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                    "tileloadd tmm4, [{p} + {s}*1]",
                    "tileloadd tmm5, [{p} + {s}*1 + 1024]",
                    "tileloadd tmm6, [{p} + {s}*1]",
                    "tileloadd tmm7, [{p} + {s}*1 + 1024]",
                    "2:",
                    concat!($op, " tmm0, tmm4, tmm6"),
                    concat!($op, " tmm1, tmm4, tmm7"),
                    concat!($op, " tmm2, tmm5, tmm6"),
                    concat!($op, " tmm3, tmm5, tmm7"),
                    "dec {n}",
                    "jnz 2b",
                    "tilerelease",
                    cfg = in(reg) &CONFIG,
                    p = in(reg) p,
                    s = in(reg) 64usize,
                    n = inout(reg) iterations => _,
                    out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                    out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
                    options(nostack),
                )
            }
        };
    }
    if int8 {
        peak!("tdpbusd");
    } else {
        peak!("tdpbf16ps");
    }
}
