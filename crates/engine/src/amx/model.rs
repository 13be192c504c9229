//! A plain-Rust model of the AMX tile unit, so that the packing and
//! blocking code around the assembly kernels runs, and is tested, on every
//! CPU: a tile configuration (palette 1), eight tiles of up to 16 rows of 64
//! bytes, loads and stores with a stride, and the products `tdpbf16ps`,
//! `tdpbusd` and `tdpbssd` with the accumulation rules of Intel's
//! pseudocode (Intel SDM, vol. 2, TDPBF16PS / TDPBSSD).
//!
//! The bf16 product follows the pseudocode's order: for each pair of the
//! shared dimension, `acc += a[2k]·b[2k]`, then `acc += a[2k+1]·b[2k+1]`,
//! each rounded to f32 (nearest even), bf16 inputs that are denormal read as
//! zero and denormal results flushed to zero. The hardware may sum a pair in
//! another order, so the assembly kernels are checked against this model bit
//! for bit on inputs whose every partial sum is exact (small integers), and
//! within rounding on the rest. The int8 products are exact: every CPU and
//! this model give the same bits.

/// Bytes per tile row, and rows per tile, at most (palette 1).
pub(crate) const ROW_BYTES: usize = 64;
pub(crate) const ROWS: usize = 16;
/// Tiles of palette 1.
pub(crate) const TILES: usize = 8;

/// A tile configuration as `ldtilecfg` reads it: 64 bytes, palette 1, the
/// bytes per row of each tile at 16 + 2t (little-endian) and its rows at 48 + t.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct Config(pub(crate) [u8; 64]);

impl Config {
    /// Tiles of `rows[t]` rows of `bytes[t]` bytes each (0 rows: unused).
    pub(crate) const fn new(rows: [u8; TILES], bytes: [u16; TILES]) -> Self {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < TILES {
            assert!(rows[t] as usize <= ROWS && bytes[t] as usize <= ROW_BYTES);
            let b = bytes[t].to_le_bytes();
            c[16 + 2 * t] = b[0];
            c[17 + 2 * t] = b[1];
            c[48 + t] = rows[t];
            t += 1;
        }
        Self(c)
    }

    /// Rows of tile `t`.
    pub(crate) fn rows(&self, t: usize) -> usize {
        usize::from(self.0[48 + t])
    }

    /// Bytes per row of tile `t`.
    pub(crate) fn bytes(&self, t: usize) -> usize {
        usize::from(u16::from_le_bytes([self.0[16 + 2 * t], self.0[17 + 2 * t]]))
    }
}

/// The eight tiles and the configuration loaded into them.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    config: Config,
    tiles: [[u8; ROWS * ROW_BYTES]; TILES],
}

impl Unit {
    /// `ldtilecfg`: shapes the tiles and zeroes them.
    pub(crate) fn load_config(config: &Config) -> Self {
        assert_eq!(config.0[0], 1, "palette 1");
        Self {
            config: *config,
            tiles: [[0; ROWS * ROW_BYTES]; TILES],
        }
    }

    /// `tilezero`.
    pub(crate) fn zero(&mut self, t: usize) {
        self.tiles[t] = [0; ROWS * ROW_BYTES];
    }

    /// `tileloadd`: row `r` of tile `t` from `base + r·stride`, its
    /// configured rows and bytes (the rest of the tile zeroed).
    ///
    /// # Safety
    /// Each row's bytes lie inside one allocation.
    pub(crate) unsafe fn load(&mut self, t: usize, base: *const u8, stride: usize) {
        let (rows, bytes) = (self.config.rows(t), self.config.bytes(t));
        self.zero(t);
        for r in 0..rows {
            // SAFETY: the caller's contract.
            let row = unsafe { std::slice::from_raw_parts(base.add(r * stride), bytes) };
            self.tiles[t][r * ROW_BYTES..r * ROW_BYTES + bytes].copy_from_slice(row);
        }
    }

    /// `tilestored`: row `r` of tile `t` to `base + r·stride`.
    ///
    /// # Safety
    /// Each row's bytes lie inside one allocation that nothing else reads
    /// or writes meanwhile.
    pub(crate) unsafe fn store(&self, t: usize, base: *mut u8, stride: usize) {
        let (rows, bytes) = (self.config.rows(t), self.config.bytes(t));
        for r in 0..rows {
            // SAFETY: the caller's contract.
            let row = unsafe { std::slice::from_raw_parts_mut(base.add(r * stride), bytes) };
            row.copy_from_slice(&self.tiles[t][r * ROW_BYTES..r * ROW_BYTES + bytes]);
        }
    }

    /// Checks the shapes of a product `c += a · b` (rows of `b` = `a`'s
    /// 4-byte groups) and returns its rows, groups of the shared dimension
    /// and 4-byte columns.
    fn check(&self, c: usize, a: usize, b: usize) -> (usize, usize, usize) {
        let cfg = &self.config;
        assert!(
            cfg.rows(c) == cfg.rows(a)
                && cfg.bytes(c) == cfg.bytes(b)
                && cfg.rows(b) == cfg.bytes(a) / 4
                && cfg.bytes(a).is_multiple_of(4)
                && cfg.bytes(c).is_multiple_of(4),
            "tile shapes do not fit a product: c {c}, a {a}, b {b}"
        );
        (cfg.rows(c), cfg.bytes(a) / 4, cfg.bytes(c) / 4)
    }

    fn word(&self, t: usize, row: usize, i: usize) -> [u8; 4] {
        let at = row * ROW_BYTES + 4 * i;
        self.tiles[t][at..at + 4].try_into().expect("4 bytes")
    }

    fn set_word(&mut self, t: usize, row: usize, i: usize, w: [u8; 4]) {
        let at = row * ROW_BYTES + 4 * i;
        self.tiles[t][at..at + 4].copy_from_slice(&w);
    }

    /// `tdpbf16ps c, a, b`: `c[m][n] += Σ_k a[m][2k]·b[k][2n] + a[m][2k+1]·b[k][2n+1]`
    /// in f32, in the order and with the rounding described above.
    pub(crate) fn dpbf16ps(&mut self, c: usize, a: usize, b: usize) {
        let bf16 = |bits: u16| {
            // Denormal inputs are read as zero.
            let bits = if bits & 0x7f80 == 0 {
                bits & 0x8000
            } else {
                bits
            };
            f32::from_bits(u32::from(bits) << 16)
        };
        let half = |w: [u8; 4], i: usize| bf16(u16::from_le_bytes([w[2 * i], w[2 * i + 1]]));
        let ftz = |x: f32| {
            if x.is_subnormal() {
                0.0f32.copysign(x)
            } else {
                x
            }
        };
        let (rows, groups, cols) = self.check(c, a, b);
        for m in 0..rows {
            for n in 0..cols {
                let mut acc = f32::from_le_bytes(self.word(c, m, n));
                for k in 0..groups {
                    let (x, y) = (self.word(a, m, k), self.word(b, k, n));
                    acc = ftz(acc + half(x, 0) * half(y, 0));
                    acc = ftz(acc + half(x, 1) * half(y, 1));
                }
                self.set_word(c, m, n, acc.to_le_bytes());
            }
        }
    }

    /// `tdpbusd c, a, b` (`a` unsigned bytes, `b` signed) and `tdpbssd`
    /// (both signed): `c[m][n] += Σ_k Σ_i a[m][4k+i]·b[k][4n+i]` in i32,
    /// wrapping.
    pub(crate) fn dp_int8(&mut self, c: usize, a: usize, b: usize, a_signed: bool) {
        let (rows, groups, cols) = self.check(c, a, b);
        for m in 0..rows {
            for n in 0..cols {
                let mut acc = i32::from_le_bytes(self.word(c, m, n));
                for k in 0..groups {
                    let (x, y) = (self.word(a, m, k), self.word(b, k, n));
                    let sum: i32 = (0..4)
                        .map(|i| {
                            let x = if a_signed {
                                i32::from(x[i] as i8)
                            } else {
                                i32::from(x[i])
                            };
                            x * i32::from(y[i] as i8)
                        })
                        .sum();
                    acc = acc.wrapping_add(sum);
                }
                self.set_word(c, m, n, acc.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_laid_out_as_ldtilecfg_reads_it() {
        let c = Config::new([16, 3, 0, 0, 0, 0, 0, 16], [64, 12, 0, 0, 0, 0, 0, 40]);
        assert_eq!(c.0[0], 1);
        assert_eq!((c.0[16], c.0[17], c.0[18]), (64, 0, 12));
        assert_eq!((c.0[48], c.0[49], c.0[55]), (16, 3, 16));
        assert_eq!(
            (c.rows(1), c.bytes(1), c.rows(7), c.bytes(7)),
            (3, 12, 16, 40)
        );
        assert_eq!(std::mem::align_of::<Config>(), 64);
    }

    #[test]
    fn loads_and_stores_follow_the_stride_and_the_shape() {
        let config = Config::new([3, 0, 0, 0, 0, 0, 0, 0], [8, 0, 0, 0, 0, 0, 0, 0]);
        let mut unit = Unit::load_config(&config);
        let src: Vec<u8> = (0..100).collect();
        // SAFETY: rows at 0, 20, 40 of 8 bytes each lie inside `src`.
        unsafe { unit.load(0, src.as_ptr().add(5), 20) };
        let mut dst = vec![0xffu8; 40];
        // SAFETY: rows at 0, 10, 20 of 8 bytes lie inside `dst`.
        unsafe { unit.store(0, dst.as_mut_ptr(), 10) };
        assert_eq!(&dst[0..8], &src[5..13]);
        assert_eq!(&dst[10..18], &src[25..33]);
        assert_eq!(&dst[20..28], &src[45..53]);
        assert!(dst[8..10].iter().chain(&dst[28..]).all(|&b| b == 0xff));
    }

    fn bf16_bytes(values: &[f32]) -> Vec<u8> {
        values
            .iter()
            .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
            .collect()
    }

    #[test]
    fn the_bf16_product_pairs_the_shared_dimension() {
        // c (2 × 3) += a (2 × 4 bf16: two pairs) · b (2 pair-rows × 3 columns of pairs).
        let config = Config::new([2, 2, 2, 0, 0, 0, 0, 0], [12, 8, 12, 0, 0, 0, 0, 0]);
        let mut unit = Unit::load_config(&config);
        let a = [[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.0, 2.0]];
        // b as a 4 × 3 matrix B[k][n], stored as rows of pairs: row k2 holds
        // (B[2k2][n], B[2k2+1][n]) for each n.
        let bm = [
            [1.0, 0.0, 2.0],
            [1.0, 1.0, 0.0],
            [0.5, -1.0, 1.0],
            [0.0, 2.0, 1.0],
        ];
        let b: Vec<f32> = (0..2)
            .flat_map(|k2| (0..3).flat_map(move |n| [bm[2 * k2][n], bm[2 * k2 + 1][n]]))
            .collect();
        let a_bytes = bf16_bytes(&a.concat());
        let b_bytes = bf16_bytes(&b);
        let c0: Vec<u8> = [10.0f32; 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        // SAFETY: every row read or written lies inside its vector.
        unsafe {
            unit.load(0, c0.as_ptr(), 12);
            unit.load(1, a_bytes.as_ptr(), 8);
            unit.load(2, b_bytes.as_ptr(), 12);
        }
        unit.dpbf16ps(0, 1, 2);
        let mut out = vec![0u8; 24];
        // SAFETY: as above.
        unsafe { unit.store(0, out.as_mut_ptr(), 12) };
        let got: Vec<f32> = out
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes(w.try_into().expect("4")))
            .collect();
        let want: Vec<f32> = (0..2)
            .flat_map(|m| {
                (0..3).map(move |n| 10.0 + (0..4).map(|k| a[m][k] * bm[k][n]).sum::<f32>())
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_int8_products_sum_groups_of_four_and_wrap() {
        // c: 1 × 1 i32; a: 1 row of 8 bytes (two groups of four); b: 2 rows
        // (one per group) of one column of 4 bytes.
        let mut unit = Unit::load_config(&Config::new(
            [1, 1, 2, 0, 0, 0, 0, 0],
            [4, 8, 4, 0, 0, 0, 0, 0],
        ));
        let a: [u8; 8] = [200, 1, 2, 3, 255, 0, 0, 1];
        let b: [u8; 8] = [0xff, 2, 3, 4, 2, 0, 0, 0x80]; // -1, 2, 3, 4, 2, 0, 0, -128
        let c0 = i32::MAX.to_le_bytes();
        // SAFETY: every row read lies inside its array.
        unsafe {
            unit.load(0, c0.as_ptr(), 4);
            unit.load(1, a.as_ptr(), 8);
            unit.load(2, b.as_ptr(), 4);
        }
        let mut signed = unit.clone();
        unit.dp_int8(0, 1, 2, false);
        signed.dp_int8(0, 1, 2, true);
        let read = |u: &Unit| {
            let mut out = [0u8; 4];
            // SAFETY: one row of 4 bytes.
            unsafe { u.store(0, out.as_mut_ptr(), 4) };
            i32::from_le_bytes(out)
        };
        // Unsigned a: -200 + 2 + 6 + 12 + 510 - 128 = 202, wrapping past i32::MAX.
        assert_eq!(read(&unit), i32::MAX.wrapping_add(202));
        // Signed a: 200 → -56, 255 → -1: 56 + 2 + 6 + 12 - 2 - 128 = -54.
        assert_eq!(read(&signed), i32::MAX.wrapping_add(-54));
    }

    #[test]
    fn denormal_bf16_inputs_read_as_zero() {
        let config = Config::new([1, 1, 1, 0, 0, 0, 0, 0], [4, 4, 4, 0, 0, 0, 0, 0]);
        let mut unit = Unit::load_config(&config);
        // a = (denormal, 1.0), b = (1.0, 1.0): only the second product counts.
        let a = [0x0001u16.to_le_bytes(), 0x3f80u16.to_le_bytes()].concat();
        let b = [0x3f80u16.to_le_bytes(), 0x3f80u16.to_le_bytes()].concat();
        // SAFETY: one row of 4 bytes each.
        unsafe {
            unit.load(1, a.as_ptr(), 4);
            unit.load(2, b.as_ptr(), 4);
        }
        unit.dpbf16ps(0, 1, 2);
        let mut out = [0u8; 4];
        // SAFETY: as above.
        unsafe { unit.store(0, out.as_mut_ptr(), 4) };
        assert_eq!(f32::from_le_bytes(out), 1.0);
    }
}
