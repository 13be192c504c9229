//! candle-kernels 0.11.1's interface over fatbins instead of PTX text: skillret's replacement of
//! the crate's `src/lib.rs`, put in place by scripts/build-cuda.sh with `build.rs` beside it.
//! `Module::ptx` returns what the driver loads (`cuModuleLoadData` takes PTX, a cubin or a
//! fatbin alike), so candle-core's `load_module(mdl.ptx().into())` loads the fatbin unchanged.
mod ptx {
    include!(concat!(env!("OUT_DIR"), "/ptx.rs"));
}

#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Id {
    Affine,
    Binary,
    Cast,
    Conv,
    Fill,
    Indexing,
    Quantized,
    Reduce,
    Sort,
    Ternary,
    Unary,
}

pub const ALL_IDS: [Id; 11] = [
    Id::Affine,
    Id::Binary,
    Id::Cast,
    Id::Conv,
    Id::Fill,
    Id::Indexing,
    Id::Quantized,
    Id::Reduce,
    Id::Sort,
    Id::Ternary,
    Id::Unary,
];

pub struct Module {
    index: usize,
    image: &'static [u8],
}

impl Module {
    pub fn index(&self) -> usize {
        self.index
    }

    /// The fatbin, as the driver loads it (copied: cudarc takes the image by value).
    pub fn ptx(&self) -> cudarc::nvrtc::Ptx {
        cudarc::nvrtc::Ptx::from_binary(self.image.to_vec())
    }
}

const fn module_index(id: Id) -> usize {
    let mut i = 0;
    while i < ALL_IDS.len() {
        if ALL_IDS[i] as u32 == id as u32 {
            return i;
        }
        i += 1;
    }
    panic!("id not found")
}

macro_rules! mdl {
    ($cst:ident, $id:ident) => {
        pub const $cst: Module = Module {
            index: module_index(Id::$id),
            image: ptx::$cst,
        };
    };
}

mdl!(AFFINE, Affine);
mdl!(BINARY, Binary);
mdl!(CAST, Cast);
mdl!(CONV, Conv);
mdl!(FILL, Fill);
mdl!(INDEXING, Indexing);
mdl!(QUANTIZED, Quantized);
mdl!(REDUCE, Reduce);
mdl!(SORT, Sort);
mdl!(TERNARY, Ternary);
mdl!(UNARY, Unary);

pub mod ffi;
